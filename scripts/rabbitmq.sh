#!/usr/bin/env bash
# rabbitmq.sh: a throwaway RabbitMQ broker, for the end-to-end tests and the
# relay benchmark.
#
#   scripts/rabbitmq.sh up     start it (installing Debian's rabbitmq-server if needed) and print its AMQP URL
#   scripts/rabbitmq.sh url    print the AMQP URL of the running broker
#   scripts/rabbitmq.sh down   stop it and delete its files
#
# It lives in .pgbox/rabbitmq (git-ignored; PGBOX_RABBITMQ_DIR moves it, to a
# directory the rabbitmq user can reach when run as root), runs as the
# rabbitmq user when started by root (as the invoking user otherwise), and
# listens only on 127.0.0.1 on free ports, with no plugins. Started again
# after a crash (a test that kills it), it takes the ports it had, so clients
# reconnect to the same URL. The Erlang port mapper (epmd) it starts, shared
# by every Erlang node on the machine, is left running.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${PGBOX_RABBITMQ_DIR:-$root/.pgbox/rabbitmq}
server=/usr/lib/rabbitmq/bin/rabbitmq-server

. "$root/scripts/lib.sh"

install() { apt_install rabbitmq-server "set RABBITMQ_URL"; }

running() { pid_running "$dir/pid"; }

url() {
  [ -f "$dir/port" ] || die "no broker: run scripts/rabbitmq.sh up"
  echo "amqp://guest:guest@127.0.0.1:$(cat "$dir/port")/"
}

# start runs the broker on AMQP port $1 and distribution port $2, in the
# background, as the rabbitmq user when root.
start() {
  local as=()
  if [ "$(id -u)" = 0 ]; then
    chown -R rabbitmq:rabbitmq "$dir"
    as=(runuser -u rabbitmq --)
  fi
  printf 'listeners.tcp.1 = 127.0.0.1:%s\n' "$1" >"$dir/rabbitmq.conf"
  echo '[].' >"$dir/enabled_plugins"
  setsid "${as[@]}" env HOME="$dir" \
    RABBITMQ_NODENAME="pgbox$1@localhost" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$1" RABBITMQ_DIST_PORT="$2" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq" RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" RABBITMQ_PID_FILE="$dir/rabbitmq.pid" \
    "$server" </dev/null >>"$dir/server.log" 2>&1 &
}

# wait_up waits up to 90 seconds (an Erlang VM boots slowly on a busy
# machine) for the broker's AMQP port $1, and reports whether it opened. It
# then records the broker's pid in $dir/pid: RabbitMQ deletes its own pid
# file as soon as it begins to stop, and down waits until it has stopped.
wait_up() {
  local _
  for _ in $(seq 900); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && pid_running "$dir/rabbitmq.pid"; then
      cp "$dir/rabbitmq.pid" "$dir/pid"
      return 0
    fi
    sleep 0.1
  done
  return 1
}

up() {
  if running; then
    url
    return
  fi
  [ -x "$server" ] || install
  [ -x "$server" ] || die "rabbitmq-server not found after installing it"
  mkdir -p "$dir"
  local port dist tries kept
  kept=$(kept_port "$dir/port")
  for tries in 1 2 3; do
    port=${kept:-$(free_port)}
    dist=$(cat "$dir/dist_port" 2>/dev/null || free_port)
    rm -f "$dir/port" "$dir/dist_port"
    start "$port" "$dist"
    if wait_up "$port"; then
      echo "$port" >"$dir/port"
      echo "$dist" >"$dir/dist_port"
      url
      return
    fi
    stop_pid "$dir/rabbitmq.pid"
  done
  give_up rabbitmq-server "$dir/server.log"
}

down() {
  local _
  say_down "RabbitMQ (scripts/rabbitmq.sh)"
  stop_pid "$dir/pid"
  for _ in $(seq 250); do running || break; sleep 0.1; done # a graceful stop may take a while
  # It may end between the check and the kill.
  if running; then kill -9 "$(cat "$dir/pid")" 2>/dev/null || true; fi
  rm -rf "$dir"
}

case "${1:-}" in
  up) up ;;
  url) url ;;
  down) down ;;
  *) echo "usage: scripts/rabbitmq.sh up|url|down" >&2; exit 2 ;;
esac
