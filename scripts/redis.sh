#!/usr/bin/env bash
# redis.sh: a throwaway Redis server, for the Redis Streams end-to-end
# tests, the relay benchmark and the orders demo.
#
#   scripts/redis.sh up     start it (installing Debian's redis-server if needed) and print its URL
#   scripts/redis.sh url    print the URL of the running server
#   scripts/redis.sh down   stop it and delete its files
#
# It lives in .pgbox/redis (git-ignored; PGBOX_REDIS_DIR moves it) and
# listens only on 127.0.0.1 on a free port. Started again after a crash (a
# test that kills it), it takes the port it had, so clients reconnect to the
# same URL, and it reads back what it had acknowledged: it appends every
# write to its append-only file and fsyncs it before answering
# (appendonly yes, appendfsync always), with no RDB snapshots. Redis's own
# default (no append-only file, a snapshot now and then) loses what came
# after the last snapshot when the process is killed, and appendfsync
# everysec up to a second of writes when the machine crashes: entries it
# had acknowledged. The relay counts an acknowledged publish as published,
# so such a loss is a lost message (docs/operations.md, "Redis Streams").
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${PGBOX_REDIS_DIR:-$root/.pgbox/redis}

. "$root/scripts/lib.sh"

server() {
  if command -v redis-server >/dev/null 2>&1; then
    command -v redis-server
  elif [ -x /usr/bin/redis-server ]; then
    echo /usr/bin/redis-server
  fi
}

install() { apt_install redis-server "set REDIS_URL"; }

running() { pid_running "$dir/pid"; }

url() {
  [ -f "$dir/port" ] || die "no server: run scripts/redis.sh up"
  echo "redis://127.0.0.1:$(cat "$dir/port")/0"
}

up() {
  if running; then
    url
    return
  fi
  local bin port tries kept
  kept=$(kept_port "$dir/port")
  bin=$(server)
  if [ -z "$bin" ]; then
    install
    bin=$(server)
  fi
  [ -n "$bin" ] || die "redis-server not found after installing it"
  mkdir -p "$dir/data"
  for tries in 1 2 3; do
    port=${kept:-$(free_port)}
    rm -f "$dir/port" "$dir/pid"
    setsid "$bin" --bind 127.0.0.1 --port "$port" --protected-mode yes --daemonize no \
      --dir "$dir/data" --appendonly yes --appendfsync always --save '' \
      --pidfile "$dir/pid" --logfile "$dir/server.log" </dev/null >/dev/null 2>&1 &
    if wait_tcp "$port" && running; then
      echo "$port" >"$dir/port"
      url
      return
    fi
    stop_pid "$dir/pid"
  done
  give_up redis-server "$dir/server.log"
}

down() {
  say_down "Redis (scripts/redis.sh)"
  stop_pid "$dir/pid"
  rm -rf "$dir"
}

case "${1:-}" in
  up) up ;;
  url) url ;;
  down) down ;;
  *) echo "usage: scripts/redis.sh up|url|down" >&2; exit 2 ;;
esac
