#!/usr/bin/env bash
# goaws.sh: a throwaway Amazon SQS stand-in (goaws, which speaks SQS's query
# protocol over HTTP), for the end-to-end tests and the relay benchmark.
#
#   scripts/goaws.sh up     start it (building goaws first if needed) and print its endpoint URL
#   scripts/goaws.sh url    print the endpoint URL of the running server
#   scripts/goaws.sh down   stop it and delete its files
#
# goaws v0.4.5 is built from the Go module proxy into .pgbox/bin once. The
# server lives in .pgbox/goaws (git-ignored; PGBOX_GOAWS_DIR moves it) and
# keeps its queues and messages in memory only: killed, it comes back empty,
# on the port it had (so clients reconnect to the same URL), and its queues
# must be created again. goaws has no setting for its listen address: it
# listens on every interface, on a free port. FIFO queues (names ending in
# .fifo) drop a message whose MessageDeduplicationId was seen in the last
# five minutes, as SQS does (goaws forgets the id once the message is
# deleted, which SQS does not).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${PGBOX_GOAWS_DIR:-$root/.pgbox/goaws}
version=v0.4.5
bin=$root/.pgbox/bin/goaws-$version

. "$root/scripts/lib.sh"

# build installs goaws into $bin. Tests start servers in parallel: each
# builds into a folder of its own and renames the binary into place, which
# is atomic.
build() {
  local tmp
  command -v go >/dev/null || die "go is not on PATH: it builds goaws; or set SQS_URL to an SQS endpoint"
  mkdir -p "$(dirname "$bin")"
  tmp=$(mktemp -d "$(dirname "$bin")/goaws-build.XXXXXX")
  # The main package is app/cmd: go install names the binary cmd.
  if ! GOBIN=$tmp go install "github.com/Admiral-Piett/goaws/app/cmd@$version" >"$tmp/build.log" 2>&1; then
    cat "$tmp/build.log" >&2
    rm -rf "$tmp"
    die "could not build goaws $version"
  fi
  mv -f "$tmp/cmd" "$bin"
  rm -rf "$tmp"
}

running() { pid_running "$dir/pid"; }

url() {
  [ -f "$dir/port" ] || die "no server: run scripts/goaws.sh up"
  echo "http://127.0.0.1:$(cat "$dir/port")"
}

# start runs goaws on port $1 in the background. Queue URLs it hands out
# name 127.0.0.1 and the port; the account id is "queue".
start() {
  cat >"$dir/goaws.yaml" <<EOF
Local:
  Host: 127.0.0.1
  Port: $1
  AccountId: "queue"
  LogToFile: false
  EnableDuplicates: true
  QueueAttributeDefaults:
    VisibilityTimeout: 30
    ReceiveMessageWaitTimeSeconds: 0
    MaximumMessageSize: 262144
EOF
  setsid "$bin" -config "$dir/goaws.yaml" Local </dev/null >>"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
}

up() {
  if running; then
    url
    return
  fi
  [ -x "$bin" ] || build
  mkdir -p "$dir"
  local port tries kept
  kept=$(kept_port "$dir/port")
  for tries in 1 2 3; do
    port=${kept:-$(free_port)}
    rm -f "$dir/port"
    start "$port"
    if wait_tcp "$port" && running; then
      echo "$port" >"$dir/port"
      url
      return
    fi
    stop_pid "$dir/pid"
  done
  give_up goaws "$dir/server.log"
}

down() {
  say_down "the SQS server (scripts/goaws.sh)"
  stop_pid "$dir/pid"
  if running; then kill -9 "$(cat "$dir/pid")" 2>/dev/null || true; fi
  rm -rf "$dir"
}

case "${1:-}" in
  up) up ;;
  url) url ;;
  down) down ;;
  *) echo "usage: scripts/goaws.sh up|url|down" >&2; exit 2 ;;
esac
