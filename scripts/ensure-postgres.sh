#!/usr/bin/env bash
# Makes sure the PostgreSQL the tests use is up, and fails loudly otherwise (the
# tests are never skipped):
#   1. reachable at $STAGEQ_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test): done;
#   2. a local cluster exists but is down: start it;
#   3. no PostgreSQL at all, on Debian/Ubuntu as root or with sudo: install Debian's
#      `postgresql` package, start its cluster, let local TCP connections in without
#      a password (trust, loopback only: a test machine) and create the database;
#   4. otherwise: print the one command that does it, and exit 1.
# STAGEQ_NO_INSTALL=1 stops it at step 4 instead of installing.
set -uo pipefail
etc=${ENSURE_PG_ETC:-/etc/postgresql} # where Debian keeps its clusters (tests point it elsewhere)
dsn=${STAGEQ_POSTGRES_DSN:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
say() { echo "ensure-postgres: $*" >&2; }

# The database the DSN names, and whether it points at this machine.
rest=${dsn#*://}; rest=${rest%%\?*}
db=${rest##*/}; [ "$db" = "$rest" ] && db=postgres
hostport=${rest%%/*}; hostport=${hostport##*@}
host=${hostport%:*}; port=${hostport##*:}; [ "$port" = "$hostport" ] && port=5432
case "$hostport" in 127.0.0.1* | localhost* | "[::1]"* | "") local_dsn=1 ;; *) local_dsn=0 ;; esac

# Without a psql client, an open port is the best test there is.
ready() {
  if command -v psql >/dev/null 2>&1; then psql -qXtA -d "$dsn" -c 'SELECT 1' >/dev/null 2>&1
  else (exec 3<>"/dev/tcp/${host:-127.0.0.1}/$port") 2>/dev/null; fi
}
wait_ready() { for _ in $(seq 1 30); do ready && return 0; sleep 1; done; return 1; }

if ready; then exit 0; fi

as_root() { # run as root: directly, or through sudo without a password prompt
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"; else return 1; fi
}
can_root() { [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; }

start_clusters() {
  command -v pg_ctlcluster >/dev/null 2>&1 && [ -d "$etc" ] || return 1
  for v in $(ls "$etc"); do
    for c in $(ls "$etc/$v"); do
      pg_ctlcluster --skip-systemctl-redirect "$v" "$c" start >/dev/null 2>&1 ||
        as_root pg_ctlcluster --skip-systemctl-redirect "$v" "$c" start >/dev/null 2>&1 || true
    done
  done
}

if [ "$local_dsn" = 1 ] && start_clusters && wait_ready; then exit 0; fi

installed=0
if [ "$local_dsn" = 1 ] && ! [ -d "$etc" ] && [ "${STAGEQ_NO_INSTALL:-}" != 1 ] &&
  command -v apt-get >/dev/null 2>&1 && can_root; then
  say "no PostgreSQL on this machine: installing Debian's postgresql package (apt-get install postgresql)"
  if as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2; then
    installed=1
  else
    say "apt-get install postgresql failed (see above)"
  fi
fi

if [ "$installed" = 1 ] && ! start_clusters; then
  say "postgresql was installed but no cluster was found under $etc to start"
elif [ "$installed" = 1 ]; then
  # Debian's cluster asks for a password on TCP; the tests connect as postgres
  # without one. Trust loopback connections on this freshly installed test cluster.
  for hba in "$etc"/*/main/pg_hba.conf; do
    [ -f "$hba" ] || continue
    as_root sed -i -E 's/^(host[[:space:]]+all[[:space:]]+all[[:space:]]+(127\.0\.0\.1\/32|::1\/128)[[:space:]]+)[a-z0-9-]+/\1trust/' "$hba"
  done
  for v in $(ls "$etc" 2>/dev/null); do
    as_root pg_ctlcluster --skip-systemctl-redirect "$v" main reload >/dev/null 2>&1 || true
  done
  if wait_ready || { psql -qXtA -h 127.0.0.1 -U postgres -d postgres -c "CREATE DATABASE \"$db\"" >/dev/null 2>&1 && wait_ready; }; then
    say "PostgreSQL is installed and running; the tests use ${dsn%%\?*}"
    exit 0
  fi
fi

say "PostgreSQL is not reachable at ${dsn%%\?*}. The tests need it; nothing was skipped."
if [ -d "$etc" ] || command -v psql >/dev/null 2>&1; then
  say "  A PostgreSQL is installed but did not answer: start it (pg_ctlcluster <version> main start),"
  say "  or point STAGEQ_POSTGRES_DSN at one whose role may CREATE DATABASE."
elif [ -f /etc/debian_version ]; then
  say "  This script installs and starts one itself when it may run apt-get as root:"
  say "    sudo $0"
else
  say "  Start one with:"
  say "    docker run -d --name stageq-pg -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=$db postgres:17"
fi
exit 1
