#!/usr/bin/env bash
# nats.sh: a throwaway NATS server with JetStream, for the end-to-end tests.
#
#   scripts/nats.sh up     start it (installing Debian's nats-server if needed) and print its URL
#   scripts/nats.sh url    print the URL of the running server
#   scripts/nats.sh down   stop it and delete its files
#
# It lives in .pgbox/nats (git-ignored; PGBOX_NATS_DIR moves it) and listens
# only on 127.0.0.1 on a free port. Started again after a crash (a test that
# kills it), it takes the port it had, so clients reconnect to the same URL.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${PGBOX_NATS_DIR:-$root/.pgbox/nats}

. "$root/scripts/lib.sh"

server() {
  if command -v nats-server >/dev/null 2>&1; then
    command -v nats-server
  elif [ -x /usr/sbin/nats-server ]; then
    echo /usr/sbin/nats-server
  fi
}

install() { apt_install nats-server "set NATS_URL"; }

running() { pid_running "$dir/pid"; }

url() {
  [ -f "$dir/port" ] || die "no server: run scripts/nats.sh up"
  echo "nats://127.0.0.1:$(cat "$dir/port")"
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
  [ -n "$bin" ] || die "nats-server not found after installing it"
  mkdir -p "$dir"
  for tries in 1 2 3; do
    port=${kept:-$(free_port)}
    rm -f "$dir/port"
    setsid "$bin" --jetstream --addr 127.0.0.1 --port "$port" --store_dir "$dir/store" \
      --pid "$dir/pid" --log "$dir/server.log" </dev/null >/dev/null 2>&1 &
    if wait_tcp "$port"; then
      echo "$port" >"$dir/port"
      url
      return
    fi
    stop_pid "$dir/pid"
  done
  give_up nats-server "$dir/server.log"
}

down() {
  say_down "NATS (scripts/nats.sh)"
  stop_pid "$dir/pid"
  rm -rf "$dir"
}

case "${1:-}" in
  up) up ;;
  url) url ;;
  down) down ;;
  *) echo "usage: scripts/nats.sh up|url|down" >&2; exit 2 ;;
esac
