package sqlbase

// PruneStatusCols are prune_status's columns but id, in the order PruneLast
// scans them and PruneRecord binds them (ran_at, the one PruneRecord does not
// bind, is the database's now), as PostgreSQL and SQLite write them in their
// Retention.Record and Retention.Last.
const PruneStatusCols = `worker_id, ran_at, logs_deleted, workers_deleted, processes_deleted,
       retain_logs_s, retain_workers_s, retain_processes_s`

// PruneStatusUpsertSet is the SET list of a Retention.Record upsert that ends
// ON CONFLICT (id) DO UPDATE (PostgreSQL, SQLite): the one row of
// prune_status takes each column of the pass just recorded.
const PruneStatusUpsertSet = `worker_id = excluded.worker_id, ran_at = excluded.ran_at,
    logs_deleted = excluded.logs_deleted, workers_deleted = excluded.workers_deleted,
    processes_deleted = excluded.processes_deleted, retain_logs_s = excluded.retain_logs_s,
    retain_workers_s = excluded.retain_workers_s, retain_processes_s = excluded.retain_processes_s`
