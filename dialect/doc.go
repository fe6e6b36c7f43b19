// Package dialect is the one boundary between stageq's core and a database.
//
// The core (packages queue and stages) never writes SQL. It calls the methods of
// Dialect, whose names read noun-then-verb (TaskClaim, TaskFinish, WorkerHeartbeat),
// each taking a context and one params struct. Each database has a package of its
// own beside this one (dialect/postgres, dialect/sqlite, dialect/sqlserver) that
// keeps its SQL next to the Go that runs it, in the database's native placeholders.
// Where the Go around the statements is the same (operator actions, reads,
// limits, retention, schedules, exclusive leases), a dialect hands its statements to dialect/sqlbase and
// embeds the result instead of copying the loops.
//
// How to implement a dialect:
//
//  1. Register a constructor for the DSN scheme(s) with Register in an init func.
//  2. Keep the schema in migrations/<name> (a package embedding the files), with
//     the same version numbers as the other dialects, and serve it from Schema.
//  3. TaskClaim must lock as it reads and skip rows that others hold; it may only
//     return tasks whose state is available, which is how the stage barrier reaches
//     the claim (see package stages).
//  4. TaskFinish must check the lease token (the fence) and return ErrLeaseLost when
//     it does not match, changing nothing.
//  5. Map driver errors to the sentinel errors of this package where they exist.
//  6. Pass the conformance suite (package conformance).
package dialect
