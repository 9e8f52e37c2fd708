#!/usr/bin/env bash
# pg.sh: a throwaway PostgreSQL cluster for tests, the demo and benchmarks.
#
#   scripts/pg.sh up     start the cluster (creating it on first use) and print its URL
#   scripts/pg.sh url    print the URL of the running cluster
#   scripts/pg.sh down   stop the cluster and delete its files
#   scripts/pg.sh crash-restart
#                        restart it in immediate mode (no checkpoint, every
#                        session cut), as after a crash: for fault tests
#
# The cluster lives in .pgbox/pg (git-ignored), or in PGBOX_PG_DIR, listens
# only on 127.0.0.1 on a free port, trusts local connections and keeps
# durability on (fsync, synchronous_commit) so benchmark figures mean what
# they say. Its database gives sessions an empty search_path (ALTER
# DATABASE … SET search_path = ''), so a query that forgets to name its
# schema fails in tests instead of finding a table by luck; internal/pgtest
# checks for it. When run as root, the server runs as the `postgres` OS
# user, because PostgreSQL refuses to run as root. When that user cannot
# reach the folder (a clone in root's private home, mode 700, as in many
# containers), `up` makes the cluster in /var/tmp/pgbox-<hash of the
# folder's path> instead, says so, and leaves a symbolic link to it in the
# folder's place, by which url, down, crash-restart and the tests find it
# (scripts/lib.sh, reach_dir).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
home=${PGBOX_PG_DIR:-$root/.pgbox/pg}
dir=$(server_dir "$home")
data=$dir/data
db=pgbox

bindir() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    # Resolve symlinks (/usr/local/bin/pg_ctl -> /usr/lib/postgresql/15/bin)
    # to find the server's own psql beside it.
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return
  fi
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return; }
  done
  die "PostgreSQL server binaries (initdb, pg_ctl) not found: install the postgresql package (15 or newer)"
}
bin=$(bindir)
psql=$bin/psql
[ -x "$psql" ] || psql=$(command -v psql) || die "psql not found: install the postgresql-client package"

# as_server runs a command as the user that owns the cluster, from /, as the
# current folder may be one that user cannot enter.
as_server() {
  if [ "$(id -u)" = 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

running() { [ -f "$data/postmaster.pid" ] && as_server "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; }

url() {
  [ -f "$dir/port" ] || die "no cluster: run scripts/pg.sh up"
  echo "postgres://postgres@127.0.0.1:$(cat "$dir/port")/$db?sslmode=disable"
}

init_cluster() {
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir"
    # The server user must reach the folder; a clone under a private home
    # directory (mode 700) would keep it out.
    runuser -u postgres -- test -w "$dir" ||
      die "the postgres user cannot write $dir: set PGBOX_PG_DIR to a folder it can reach (e.g. /tmp/pgbox-pg)"
  fi
  as_server "$bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; die "initdb failed"; }
  cat >>"$data/postgresql.conf" <<CONF
# pgbox throwaway cluster
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 400
shared_buffers = 256MB
fsync = on
synchronous_commit = on
log_min_messages = warning
log_min_error_statement = panic
CONF
}

up() {
  dir=$(reach_dir "$home")
  data=$dir/data
  if running; then
    ensure_db "$(cat "$dir/port")"
    url
    return
  fi
  [ -f "$data/PG_VERSION" ] || init_cluster
  local port attempt
  for attempt in 1 2 3; do
    port=$(free_port)
    if as_server "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -o "-p $port" -w -t 60 start >/dev/null; then
      echo "$port" >"$dir/port"
      break
    fi
    [ $attempt = 3 ] && { tail -20 "$dir/server.log" >&2; die "could not start PostgreSQL (log: $dir/server.log)"; }
  done
  ensure_db "$port"
  url
}

# ensure_db creates the database unless it exists and empties its default
# search_path; both are idempotent, so a cluster made by an older pg.sh gets
# the setting on its next `up`. A server-side default rather than a
# connection's startup parameter: the tests connect the way users do,
# through PgBouncer too, which refuses startup parameters.
ensure_db() {
  local port=$1
  if ! "$psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
    "$psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE $db" >/dev/null
  fi
  "$psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "ALTER DATABASE $db SET search_path = ''" >/dev/null
}

crash_restart() {
  running || die "no cluster running: run scripts/pg.sh up"
  as_server "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -o "-p $(cat "$dir/port")" -m immediate -w -t 60 restart >/dev/null
}

down() {
  say_down "PostgreSQL (scripts/pg.sh)" "its data directory (every database in it)"
  if running; then
    as_server "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
  fi
  drop_dir "$home"
}

case "${1:-}" in
  up) up ;;
  url) url ;;
  down) down ;;
  crash-restart) crash_restart ;;
  *) echo "usage: scripts/pg.sh up|url|down|crash-restart" >&2; exit 2 ;;
esac
