# lib.sh: what the throwaway-server scripts (pg.sh, nats.sh, pgbouncer.sh)
# share. Source it; it defines functions only.

# die prints the calling script's name and a message, and exits 1.
die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# kept_port prints the port recorded in $1 by an earlier start of a
# server, if any. A restart (after a crash, or a test's SIGKILL) takes it
# on every try, so that clients reconnect to the URL they were given; a
# first start takes a free port each try.
kept_port() { cat "$1" 2>/dev/null || true; }

# free_port prints a loopback port nothing listens on, below the kernel's
# range of ephemeral ports: tests kill servers and start them again on the
# same port, and a client that reconnects in a loop to a port inside that
# range meanwhile can connect to itself (TCP simultaneous open, when the
# kernel picks the destination port as its source port), holding the port
# so that the server cannot listen on it again. (Where that range starts
# below 11000, any port from 20000 will do.)
free_port() {
  local port tries low base=10000 span
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null) || low=32768
  span=$((low - base))
  if [ "$span" -lt 1000 ]; then base=20000 span=32767; fi
  for tries in $(seq 100); do
    port=$((base + RANDOM % span))
    if ! ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
      echo "$port"
      return
    fi
  done
  die "no free loopback port found"
}

# wait_tcp waits up to 10 seconds for 127.0.0.1:$1 to accept a connection.
wait_tcp() {
  local _
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# apt_install installs Debian's package $1 as root, fetching the package
# lists first if the install fails without them; $2 is what to do instead
# when not root.
apt_install() {
  [ "$(id -u)" = 0 ] || die "$1 is not installed: run 'sudo apt-get install $1', or $2"
  echo "$(basename "$0"): installing $1 from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$1" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get install -y -q "$1" >/dev/null; } ||
    die "apt-get could not install $1"
}

# pid_running reports whether the process whose pid file is $1 (its first
# line: a postmaster.pid will do) runs. A
# zombie does not: a server killed by a test stays one until its parent
# reaps it, which on a busy machine can come after the test starts it
# again, and kill -0 succeeds on it.
pid_running() {
  [ -f "$1" ] && pid_alive "$(head -1 "$1")"
}

# pid_alive reports whether process $1 runs and is not a zombie.
pid_alive() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  # The state follows the command's closing parenthesis in /proc/PID/stat.
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ "$state" != Z ]
}

# stop_pid stops the process whose pid file is $1, if it runs, and waits up
# to 5 seconds for it to go.
stop_pid() {
  local _
  pid_running "$1" || return 0
  kill "$(cat "$1")"
  for _ in $(seq 50); do pid_running "$1" || return 0; sleep 0.1; done
}

# say_down says, on stderr, what down is about to do to server $1, so that
# make down does not end in silence: stop it and delete its files ($2,
# "its files" by default), or only delete what is left of them, since it
# is not running. Each script defines running; call this first in its
# down.
say_down() {
  local files=${2:-its files}
  if running; then
    echo "$1: stopping it and deleting $files" >&2
  else
    echo "$1: not running; deleting what is left of $files" >&2
  fi
}

# give_up shows the end of log $2 and dies saying that $1 did not start.
give_up() {
  tail -20 "$2" >&2 || true
  die "could not start $1 (log: $2)"
}

# server_dir prints where a server that runs as the postgres OS user keeps
# the files meant for folder $1: $1 itself (made absolute), or, when $1 is a
# symbolic link made by reach_dir, the folder it points to.
server_dir() {
  local want=$1
  case $want in /*) ;; *) want=$PWD/$want ;; esac
  if [ -L "$want" ]; then readlink "$want"; else echo "$want"; fi
}

# reach_dir is server_dir for a server about to be created: run as root in
# a place the postgres user cannot traverse (a clone in root's private
# home, mode 700, as in many containers), it makes a private folder owned
# by postgres under /var/tmp, named after $1's path, links $1 to it (so
# server_dir finds it next time), says so on stderr and prints it.
reach_dir() {
  local want base
  want=$(server_dir "$1")
  if [ "$(id -u)" != 0 ] || [ -L "$1" ]; then
    echo "$want"
    return
  fi
  mkdir -p "$(dirname "$want")"
  if runuser -u postgres -- test -x "$(dirname "$want")"; then
    echo "$want"
    return
  fi
  [ -n "$(ls -A "$want" 2>/dev/null)" ] &&
    die "the postgres user cannot reach $want: stop what runs there and delete it, then try again"
  base=/var/tmp/pgbox-$(printf %s "$want" | sha256sum | cut -c1-12)
  mkdir -p -m 700 "$base"
  chown postgres: "$base"
  rm -rf "$want"
  ln -s "$base" "$want"
  echo "$(basename "$0"): the postgres user cannot reach $(dirname "$want") (a private home directory?):" \
    "using $base instead; $want links to it" >&2
  echo "$base"
}

# drop_dir deletes a server's folder $1 and, when $1 is a link made by
# reach_dir, the link too.
drop_dir() {
  rm -rf "$(server_dir "$1")"
  if [ -L "$1" ]; then rm -f "$1"; fi
}
