// Package queue is stageq's Go API: a Client that enqueues tasks and whole
// multi-stage plans, and a Worker that claims and runs them.
//
// A task's body is SQL text (kind "sql", run on the queue's database or a target
// database) or the payload of a Go handler registered on the worker for its kind.
// Tasks of one process run in stages: every task of a lower ExecutionOrder
// finishes before any task of a higher one starts (package stages). The database
// is the only coordinator: run as many workers as you like against one database.
//
// The claim path, in order: Worker.Run's loop asks the dialect for up to its free
// capacity (dialect.Dialect.TaskClaim), runs each task in its own goroutine
// (runner.go), and ends each attempt with a fenced TaskFinish. A heartbeat
// (heartbeat.go) extends the leases of running tasks and rescues expired ones.
package queue
