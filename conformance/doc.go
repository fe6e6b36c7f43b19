// Package conformance is stageq's behaviour, specified once and proven against
// every dialect that is available: SQLite always, PostgreSQL (STAGEQ_POSTGRES_DSN,
// default the local server), SQL Server when STAGEQ_SQLSERVER_DSN is set.
//
// Each test gets a database of its own (a temp file, or a fresh PostgreSQL or SQL
// Server database that is dropped afterwards), so runs never collide. Crash tests
// run real worker processes, built once in TestMain, and kill them with SIGKILL.
// The package has no non-test code beyond this comment.
package conformance
