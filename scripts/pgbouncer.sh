#!/usr/bin/env bash
# pgbouncer.sh: a throwaway PgBouncer in transaction pooling mode in front of
# the test PostgreSQL, for the tests that prove pgbox works behind a pooler.
#
#   scripts/pgbouncer.sh up [DATABASE_URL]
#                              start it (installing Debian's pgbouncer if
#                              needed) in front of DATABASE_URL (default: the
#                              cluster of scripts/pg.sh) and print its URL
#   scripts/pgbouncer.sh url   print the URL of the running pooler
#   scripts/pgbouncer.sh down  stop it and delete its files
#
# It lives in .pgbox/pgbouncer (git-ignored; under /var/tmp when the postgres
# user cannot reach the clone, as scripts/pg.sh says), listens only on 127.0.0.1 on a
# free port, and keeps PgBouncer's stock behaviour: pool_mode = transaction,
# no ignore_startup_parameters, no prepared-statement support (1.18 has
# none), so a client that relies on session state fails here as it would in
# production. Only the connection limits are raised, for parallel tests,
# and every database of the server is reachable through it (a test may make
# a database of its own), besides DATABASE_URL's.
# PgBouncer refuses to run as root: as root it runs as the postgres user.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
home=${PGBOX_PGBOUNCER_DIR:-$root/.pgbox/pgbouncer}
dir=$(server_dir "$home")

server() {
  if command -v pgbouncer >/dev/null 2>&1; then
    command -v pgbouncer
  elif [ -x /usr/sbin/pgbouncer ]; then
    echo /usr/sbin/pgbouncer
  fi
}

install() {
  apt_install pgbouncer "set PGBOUNCER_URL"
  # The package starts a system-wide pgbouncer on port 6432; this script
  # runs its own.
  service pgbouncer stop >/dev/null 2>&1 || true
}

# as_server runs a command as the user the pooler runs as.
as_server() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

running() { pid_running "$dir/pid"; }

url() {
  [ -f "$dir/url" ] || die "no pooler: run scripts/pgbouncer.sh up"
  cat "$dir/url"
}

up() {
  if running; then
    url
    return
  fi
  local upstream=${1:-${DATABASE_URL:-}}
  [ -n "$upstream" ] || upstream=$("$root/scripts/pg.sh" up)
  # postgres://user[:pass]@host:port/db?params: the pooler needs host, port,
  # database and user; it connects to the server with the same user.
  local rest=${upstream#*://} userinfo user host port db
  userinfo=${rest%%@*}
  user=${userinfo%%:*}
  rest=${rest#*@}
  host=${rest%%[:/]*}
  port=5432
  [[ $rest == "$host":* ]] && { port=${rest#"$host":}; port=${port%%/*}; }
  db=${rest#*/}
  db=${db%%\?*}
  [ -n "$user" ] && [ -n "$host" ] && [ -n "$db" ] || die "cannot read user, host and database from $upstream"

  local bin
  bin=$(server)
  if [ -z "$bin" ]; then
    install
    bin=$(server)
  fi
  [ -n "$bin" ] || die "pgbouncer not found after installing it"
  dir=$(reach_dir "$home")
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$dir"
    # The pooler's user must reach the folder; a clone under a private
    # home directory (mode 700) would keep it out.
    runuser -u postgres -- test -w "$dir" ||
      die "the postgres user cannot write $dir: set PGBOX_PGBOUNCER_DIR to a folder it can reach (e.g. /tmp/pgbox-pgbouncer)"
  fi
  local tries p
  for tries in 1 2 3; do
    p=$(free_port)
    cat >"$dir/pgbouncer.ini" <<EOF
[databases]
$db = host=$host port=$port dbname=$db
* = host=$host port=$port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $p
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 40
logfile = $dir/pgbouncer.log
pidfile = $dir/pid
EOF
    echo "\"$user\" \"\"" >"$dir/userlist.txt"
    [ "$(id -u)" = 0 ] && chown -R postgres "$dir"
    rm -f "$dir/pid"
    as_server "$bin" -d "$dir/pgbouncer.ini" >/dev/null 2>&1 || true
    if wait_tcp "$p"; then
      echo "postgres://$user@127.0.0.1:$p/$db?sslmode=disable" >"$dir/url"
      url
      return
    fi
    stop_pid "$dir/pid"
  done
  give_up pgbouncer "$dir/pgbouncer.log"
}

down() {
  say_down "PgBouncer (scripts/pgbouncer.sh)"
  stop_pid "$dir/pid"
  drop_dir "$home"
}

case "${1:-}" in
  up) up "${2:-}" ;;
  url) url ;;
  down) down ;;
  *) echo "usage: scripts/pgbouncer.sh up [DATABASE_URL]|url|down" >&2; exit 2 ;;
esac
