#!/usr/bin/env bash
# chromium.sh: Debian's headless Chromium, for the console's browser test
# (cmd/inboxctl/internal/console, TestOnCallPath).
#
#   scripts/chromium.sh path   print the browser's path, installing Debian's chromium package first if it is missing
#
# Installing needs root (or sudo by hand: 'sudo apt-get install chromium');
# CHROMIUM names a browser of your own instead. The test runs the browser
# with its own throwaway profile and the flags a closed network needs.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)

. "$root/scripts/lib.sh"

browser() {
  local name
  if [ -n "${CHROMIUM:-}" ]; then
    [ -x "$CHROMIUM" ] || die "CHROMIUM=$CHROMIUM is not an executable file"
    echo "$CHROMIUM"
    return
  fi
  for name in chromium chromium-browser; do
    if command -v "$name" >/dev/null 2>&1; then
      command -v "$name"
      return
    fi
  done
  if [ -x /usr/bin/chromium ]; then
    echo /usr/bin/chromium
  fi
}

path() {
  local bin
  bin=$(browser)
  if [ -z "$bin" ]; then
    apt_install chromium "set CHROMIUM to a Chromium or Chrome binary"
    bin=$(browser)
  fi
  [ -n "$bin" ] || die "chromium not found after installing it"
  echo "$bin"
}

case "${1:-}" in
  path) path ;;
  *) echo "usage: scripts/chromium.sh path" >&2; exit 2 ;;
esac
