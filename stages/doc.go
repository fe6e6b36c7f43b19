// Package stages holds stageq's model of ordered parallel stages: the plan a user
// submits (one process, many stages, many tasks) and the rule that orders them.
//
// The rule (the stage barrier): tasks of one process with the same ExecutionOrder
// may run in parallel; a task starts only when no unfinished task with a lower
// order exists in its process. Finished means succeeded or discarded; a task that
// failed for good still blocks the later stages until it is retried or discarded.
// Different processes progress independently. Tasks enqueued without a process go
// to the "default" process, which gives the seed's global barrier.
//
// Where the rule is enforced: in the database, not in workers. Each dialect keeps
// only the tasks of a process's lowest unfinished order 'available' and the rest
// 'blocked' (see open_stage in routines/postgres/30_stages.sql and
// dialect/sqlite/stage.go), and a claim only ever takes available tasks. CheckOrder in this package verifies
// the rule from the Logs trail; the conformance suite uses it.
package stages
