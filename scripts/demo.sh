#!/usr/bin/env bash
# Seed 001's experiment on the embedded SQLite default, no server needed:
# three workers, nine tasks in five stages, then the Logs table.
set -euo pipefail
cd "$(dirname "$0")/.."
db=${DEMO_DB:-demo.db}
dsn="sqlite://$db"
rm -f "$db" "$db-wal" "$db-shm"

echo "== queuectl migrate up"
bin/queuectl --dsn "$dsn" migrate up
echo "== enqueue --file examples/seed001.yaml   (one transaction: workers never see half a plan)"
bin/enqueue --dsn "$dsn" --file examples/seed001.yaml
echo "== three workers (like the seed's three windows), each exiting once the queue is idle for 2s"
pids=()
for i in 1 2 3; do
  bin/worker --dsn "$dsn" --id "worker-$i" --concurrency 1 --exit-when-idle 2s --log-format json --log-level warn &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "== queuectl logs   (same-order tasks overlap; each stage starts after the one before ended)"
bin/queuectl --dsn "$dsn" logs
