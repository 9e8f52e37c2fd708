#!/usr/bin/env bash
# pgpair.sh: a throwaway PostgreSQL primary with an asynchronous streaming
# standby, for the failover test that measures what asynchronous
# replication loses (test/failover, async_test.go).
#
#   scripts/pgpair.sh up              start the pair (creating it on first use), wait
#                                     until the standby streams, and print the URL
#   scripts/pgpair.sh url [primary|standby]
#                                     print the URL: both servers with
#                                     target_session_attrs=read-write, or one of them
#   scripts/pgpair.sh detach-standby  the standby stops receiving WAL (its
#                                     primary_conninfo emptied, reloaded): it keeps
#                                     what it has, and gets nothing the primary commits
#                                     from then on
#   scripts/pgpair.sh kill-primary    SIGKILL the primary's postmaster and every
#                                     process of it (the machine lost)
#   scripts/pgpair.sh promote         promote the standby and wait until it takes writes
#   scripts/pgpair.sh down            stop both servers and delete their files
#
# It lives in .pgbox/pgpair (git-ignored), or in PGBOX_PGPAIR_DIR. The
# primary is made by initdb with scripts/pg.sh's settings (loopback only, a
# free port, trust, durability on, an empty search_path in database pgbox),
# the standby by pg_basebackup -R from it. synchronous_standby_names stays
# empty: a commit returns once it is on the primary alone, and the standby
# replays it a moment later, as with Patroni's default or a hand-made
# standby. kill-primary kills the postmaster and every child of it at once.
# When run as
# root, the servers run as the postgres OS user, in a folder that user can
# reach (scripts/lib.sh, reach_dir).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
home=${PGBOX_PGPAIR_DIR:-$root/.pgbox/pgpair}
dir=$(server_dir "$home")
db=pgbox

bindir() {
  local d
  if command -v pg_ctl >/dev/null 2>&1; then
    d=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
    [ -x "$d/pg_basebackup" ] && { echo "$d"; return; }
  fi
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && [ -x "$d/pg_basebackup" ] && { echo "$d"; return; }
  done
  die "PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) not found: install the postgresql package (15 or newer)"
}
bin=$(bindir)

# server runs a command as the user that owns the servers, from /, as the
# current folder may be one that user cannot enter.
server() {
  if [ "$(id -u)" = 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && "$@")
  fi
}

# sql runs SQL $2 on server $1 (primary or standby), database $db, and
# prints its rows.
sql() {
  "$bin/psql" -X -q -At -h 127.0.0.1 -p "$(cat "$dir/$1.port")" -U postgres -d "$db" -c "$2"
}

running() { pid_running "$dir/$1/postmaster.pid"; }

url() {
  [ -f "$dir/standby.port" ] || die "no pair: run scripts/pgpair.sh up"
  case "${1:-}" in
    "") echo "postgres://postgres@127.0.0.1:$(cat "$dir/primary.port"),127.0.0.1:$(cat "$dir/standby.port")/$db?target_session_attrs=read-write&sslmode=disable" ;;
    primary | standby) echo "postgres://postgres@127.0.0.1:$(cat "$dir/$1.port")/$db?sslmode=disable" ;;
    *) die "url takes primary, standby or nothing, not '$1'" ;;
  esac
}

# start starts server $1 on its recorded port.
start() {
  server "$bin/pg_ctl" -D "$dir/$1" -l "$dir/$1.log" -o "-p $(cat "$dir/$1.port")" -w -t 60 start >/dev/null ||
    give_up "the $1" "$dir/$1.log"
}

create_primary() {
  server "$bin/initdb" -N -D "$dir/primary" -U postgres --auth=trust --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; die "initdb failed"; }
  cat >>"$dir/primary/postgresql.conf" <<CONF
# pgbox throwaway pair: scripts/pg.sh's settings, asynchronous replication
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 400
fsync = on
synchronous_commit = on
synchronous_standby_names = ''
log_min_messages = warning
log_min_error_statement = panic
CONF
  free_port >"$dir/primary.port"
  start primary
  "$bin/psql" -X -q -h 127.0.0.1 -p "$(cat "$dir/primary.port")" -U postgres -d postgres \
    -c "CREATE DATABASE $db" -c "ALTER DATABASE $db SET search_path = ''" >/dev/null
}

create_standby() {
  server "$bin/pg_basebackup" -h 127.0.0.1 -p "$(cat "$dir/primary.port")" -U postgres -D "$dir/standby" -R -X stream -c fast \
    >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log" >&2; die "pg_basebackup failed"; }
  free_port >"$dir/standby.port"
}

# wait_streaming waits up to 30 seconds for the standby's WAL receiver to
# stream from the primary.
wait_streaming() {
  local _
  for _ in $(seq 300); do
    [ "$(sql standby "SELECT status FROM pg_catalog.pg_stat_wal_receiver" 2>/dev/null)" = streaming ] && return 0
    sleep 0.1
  done
  give_up "the standby's streaming" "$dir/standby.log"
}

up() {
  dir=$(reach_dir "$home")
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
  [ -f "$dir/primary.port" ] || create_primary
  running primary || start primary
  [ -f "$dir/standby.port" ] || create_standby
  if ! running standby; then
    start standby
    wait_streaming
  fi
  url
}

detach_standby() {
  running standby || die "no standby running: run scripts/pgpair.sh up"
  # primary_conninfo is reloadable (PostgreSQL 13+): emptied, the WAL
  # receiver stops and is not started again.
  sql standby "ALTER SYSTEM SET primary_conninfo = ''" >/dev/null
  sql standby "SELECT pg_catalog.pg_reload_conf()" >/dev/null
  local _
  for _ in $(seq 300); do
    [ "$(sql standby "SELECT count(*) FROM pg_catalog.pg_stat_wal_receiver")" = 0 ] && return 0
    sleep 0.1
  done
  die "the standby's WAL receiver still runs 30 seconds after its primary_conninfo was emptied"
}

# kill_primary kills the postmaster and its children together: each child
# leads a process group of its own (PostgreSQL's children call setsid), so
# the postmaster's group is the postmaster alone. Stopped first, it forks no
# child between the listing and the kill.
kill_primary() {
  running primary || die "no primary running: run scripts/pgpair.sh up"
  local pm
  pm=$(head -1 "$dir/primary/postmaster.pid")
  kill -STOP "$pm"
  # shellcheck disable=SC2046 # one pid a word
  kill -KILL "$pm" $(ps -o pid= --ppid "$pm") 2>/dev/null || true
  local _
  for _ in $(seq 300); do
    running primary || return 0
    sleep 0.1
  done
  die "the primary's postmaster still runs 30 seconds after SIGKILL"
}

promote() {
  running standby || die "no standby running: run scripts/pgpair.sh up"
  server "$bin/pg_ctl" -D "$dir/standby" -w -t 60 promote >/dev/null || give_up "the promotion" "$dir/standby.log"
  local _
  for _ in $(seq 300); do
    [ "$(sql standby "SELECT NOT pg_catalog.pg_is_in_recovery()")" = t ] && return 0
    sleep 0.1
  done
  die "the standby takes no writes 30 seconds after its promotion"
}

down() {
  local node
  for node in standby primary; do
    if running "$node"; then
      server "$bin/pg_ctl" -D "$dir/$node" -m immediate -w stop >/dev/null || true
    fi
  done
  drop_dir "$home"
}

case "${1:-}" in
  up) up ;;
  url) url "${2:-}" ;;
  detach-standby) detach_standby ;;
  kill-primary) kill_primary ;;
  promote) promote ;;
  down) down ;;
  *) echo "usage: scripts/pgpair.sh up|url [primary|standby]|detach-standby|kill-primary|promote|down" >&2; exit 2 ;;
esac
