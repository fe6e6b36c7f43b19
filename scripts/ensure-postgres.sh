#!/usr/bin/env bash
# Makes sure the PostgreSQL the tests use is up: start the local cluster if it is
# down, and fail loudly if it still cannot be reached (never skip the tests).
set -uo pipefail
dsn=${STAGEQ_POSTGRES_DSN:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
ready() { pg_isready -q -d "$dsn" >/dev/null 2>&1 || psql -qXtA -d "$dsn" -c 'SELECT 1' >/dev/null 2>&1; }
if ready; then exit 0; fi
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
  for v in $(ls /etc/postgresql); do
    pg_ctlcluster --skip-systemctl-redirect "$v" main start >/dev/null 2>&1 || true
  done
  for _ in $(seq 1 30); do ready && exit 0; sleep 1; done
fi
echo "ensure-postgres: PostgreSQL is not reachable at ${dsn%%\?*}." >&2
echo "  The tests need it. Start it, or point STAGEQ_POSTGRES_DSN at one (a role that may CREATE DATABASE)." >&2
exit 1
