// Package bench is stageq's end-to-end benchmark suite (issue 6): drain and
// enqueue throughput, pickup latency, stage handoff, claim cost by queue depth,
// the cost of an idle worker and the number of distinct statements the queue
// sends, and a peer: River's own `river bench` burn-down of the same number of
// jobs (river.go; River's CLI is built from the separate module in bench/river),
// which every drain is compared with. On PostgreSQL each drain also reports the
// transactions and backend CPU it cost the database per task (pgcost.go).
//
// Run drives the suite against PostgreSQL and SQLite (SQL Server when its DSN
// is given), each scenario in databases of its own, and prints one JSON line
// per scenario and a table at the end; cmd/stageq-bench is its command line.
//
// The suite measures through the public API (queue.Client, queue.Worker, the
// enqueue and worker binaries) and the dialect interface. The only SQL of its
// own fills tables fast for the depth scenario and reads the Logs trail for
// timings measured on the database's clock.
//
// The *_test.go files hold unit tests and the per-dialect micro-benchmarks
// (go test -bench . ./bench/) for comparison with benchstat.
package bench
