#!/usr/bin/env bash
# pgaf.sh: a throwaway PostgreSQL HA cluster (pg_auto_failover: a monitor, a
# primary and a secondary) for the failover tests.
#
#   scripts/pgaf.sh up            start the cluster (creating it on first use; a node
#                                 killed earlier comes back and rejoins as the
#                                 secondary), wait until the formation is a healthy
#                                 primary and secondary, and print the URL
#   scripts/pgaf.sh url           print the URL: both nodes, target_session_attrs=read-write
#   scripts/pgaf.sh state         print each node's name, host:port and state, one a line
#   scripts/pgaf.sh primary       print the current primary's host:port
#   scripts/pgaf.sh kill-primary  SIGKILL the primary's node (its keeper, postmaster and
#                                 sessions: the machine lost) and print its host:port
#   scripts/pgaf.sh wait-primary  wait until another node is promoted and takes writes,
#                                 and print its host:port
#   scripts/pgaf.sh switchover    a planned switchover (pg_autoctl perform switchover):
#                                 waits until the other node takes writes, and prints it;
#                                 exits 3 if the old primary committed without its
#                                 secondary meanwhile (see switchover below)
#   scripts/pgaf.sh down          stop the cluster and delete its files
#
# It lives in .pgbox/pgaf (git-ignored), or in PGBOX_PGAF_DIR, and needs
# Debian's postgresql-15-auto-failover, which it installs when run as root.
# Every server listens only on 127.0.0.1, on free ports, trusts local
# connections and runs as the postgres OS user when run as root, in a folder
# that user can reach (scripts/lib.sh, reach_dir). Each node's keeper
# (pg_autoctl run) runs in a session of its own, whose id is its pid file.
#
# Replication is pg_auto_failover's default: synchronous, with one
# secondary (synchronous_standby_names = 'ANY 1 (…)'), so a commit returns
# only once the secondary has it. A primary left without its secondary is
# put in wait_primary and commits asynchronously until one is back: what it
# commits meanwhile is on one server only.
#
# The monitor is set to notice a lost primary within about 2 seconds and to
# promote the secondary 3 seconds later (node_considered_unhealthy_timeout,
# primary_demote_timeout), so that a test's failover takes seconds;
# pg_auto_failover's own defaults (20 and 30 seconds) make a production
# failover take about a minute. The database, pgbox, gives sessions an empty
# search_path, as scripts/pg.sh's does.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
home=${PGBOX_PGAF_DIR:-$root/.pgbox/pgaf}
dir=$(server_dir "$home")
db=pgbox
package=postgresql-15-auto-failover
pgctl=/usr/lib/postgresql/15/bin/pg_ctl
psql=/usr/lib/postgresql/15/bin/psql
nodes="node1 node2"

# as_owner sets the array owner to the command prefix that runs a command
# as the user that owns the cluster (postgres, when run as root), with
# pg_autoctl's configuration and runtime files kept in the cluster's folder.
as_owner() {
  owner=()
  [ "$(id -u)" = 0 ] && owner=(runuser -u postgres --)
  owner+=(env HOME="$dir" XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/share" XDG_RUNTIME_DIR="$dir/run")
}

# server runs a command as the cluster's owner, from /, as the current
# folder may be one that user cannot enter.
server() {
  local owner
  as_owner
  (cd / && "${owner[@]}" "$@")
}

# keep runs pg_autoctl's keeper for $1 (monitor, node1 or node2) as the
# cluster's owner, in the background, in a session of its own whose id
# goes to $1.pid.
keep() {
  local owner
  as_owner
  (cd / && exec setsid "${owner[@]}" pg_autoctl run --pgdata "$dir/$1" </dev/null >>"$dir/$1.log" 2>&1) &
  echo $! >"$dir/$1.pid"
}

# monitor runs SQL $1 on the monitor and prints its rows.
monitor() {
  "$psql" -X -q -At -F ' ' -h 127.0.0.1 -p "$(cat "$dir/monitor.port")" -U postgres -d pg_auto_failover -c "$1"
}

url() {
  [ -f "$dir/node2.port" ] || die "no cluster: run scripts/pgaf.sh up"
  echo "postgres://postgres@127.0.0.1:$(cat "$dir/node1.port"),127.0.0.1:$(cat "$dir/node2.port")/$db?target_session_attrs=read-write&sslmode=disable"
}

state() { monitor "SELECT nodename, nodehost || ':' || nodeport, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid"; }

# primary prints the host:port of each node in state primary or
# wait_primary (reported and assigned): none, one, or for a moment while the
# monitor has not yet noticed a lost primary, two.
primary() {
  monitor "SELECT nodehost || ':' || nodeport FROM pgautofailover.node
           WHERE reportedstate = goalstate AND reportedstate IN ('primary', 'wait_primary')"
}

# writable reports whether the node at host:port $1 takes writes.
writable() {
  "$psql" -X -q -At -h "${1%:*}" -p "${1#*:}" -U postgres -d "$db" \
    -c "SELECT NOT pg_catalog.pg_is_in_recovery()" 2>/dev/null | grep -q t
}

# wait_healthy waits up to 2 minutes for one primary and one secondary.
wait_healthy() {
  local _
  for _ in $(seq 1200); do
    if [ "$(monitor "SELECT count(*) FILTER (WHERE reportedstate = 'primary' AND goalstate = 'primary') || ' ' ||
                            count(*) FILTER (WHERE reportedstate = 'secondary' AND goalstate = 'secondary')
                     FROM pgautofailover.node" 2>/dev/null)" = "1 1" ]; then
      return 0
    fi
    sleep 0.1
  done
  state >&2 || true
  give_up "the formation (no healthy primary and secondary within 2 minutes)" "$dir/node2.log"
}

create_monitor() {
  local port
  port=$(free_port)
  server pg_autoctl create monitor --pgctl "$pgctl" --pgdata "$dir/monitor" --pgport "$port" \
    --hostname 127.0.0.1 --auth trust --no-ssl >>"$dir/monitor.log" 2>&1 || give_up "the monitor" "$dir/monitor.log"
  server pg_autoctl config set --pgdata "$dir/monitor" postgresql.listen_addresses 127.0.0.1 >/dev/null
  cat >>"$dir/monitor/postgresql.conf" <<CONF
# pgbox: notice a lost primary within about 2 seconds, promote 3 seconds later
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 2000
pgautofailover.primary_demote_timeout = 3000
CONF
  echo "$port" >"$dir/monitor.port"
}

# create_node creates node $1 (its keeper stopped): the primary when it is
# the first, else a secondary cloned from the primary.
create_node() {
  local port
  port=$(free_port)
  server pg_autoctl create postgres --pgctl "$pgctl" --pgdata "$dir/$1" --pgport "$port" --listen 127.0.0.1 \
    --hostname 127.0.0.1 --name "$1" --auth trust --no-ssl --username postgres --dbname "$db" \
    --monitor "postgres://autoctl_node@127.0.0.1:$(cat "$dir/monitor.port")/pg_auto_failover?sslmode=disable" \
    >>"$dir/$1.log" 2>&1 || give_up "PostgreSQL node $1" "$dir/$1.log"
  # A secondary copies its primary's settings; the primary's are the
  # throwaway cluster's of scripts/pg.sh.
  if [ "$1" = node1 ]; then
    cat >>"$dir/$1/postgresql.conf" <<CONF
# pgbox throwaway cluster
max_connections = 400
log_min_messages = warning
log_min_error_statement = panic
CONF
  fi
  echo "$port" >"$dir/$1.port"
}

up() {
  if ! command -v pg_autoctl >/dev/null 2>&1 || [ ! -f /usr/share/postgresql/15/extension/pgautofailover.control ]; then
    apt_install "$package" "run the failover tests as root"
  fi
  [ -x "$pgctl" ] || die "$pgctl not found after installing $package"
  dir=$(reach_dir "$home")
  mkdir -p "$dir/run"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir" "$dir/run"
  local part _
  for part in monitor $nodes; do
    if [ ! -f "$dir/$part.port" ]; then
      if [ "$part" = monitor ]; then create_monitor; else create_node "$part"; fi
    fi
    pid_running "$dir/$part.pid" || keep "$part"
    # A node that rejoins after a failover is rewound first: give it a minute.
    for _ in 1 2 3 4 5 6; do wait_tcp "$(cat "$dir/$part.port")" && continue 2; done
    give_up "$part" "$dir/$part.log"
  done
  wait_healthy
  local at
  at=$(primary)
  "$psql" -X -q -h "${at%:*}" -p "${at#*:}" -U postgres -d postgres -c "ALTER DATABASE $db SET search_path = ''" >/dev/null
  url
}

kill_primary() {
  local at node
  at=$(primary)
  [ -n "$at" ] || die "no primary to kill: $(state | tr '\n' ';')"
  node=$(monitor "SELECT nodename FROM pgautofailover.node WHERE nodeport = ${at#*:}")
  kill -KILL -- "-$(cat "$dir/$node.pid")"
  # Until its postmaster is gone, the node may still take connections.
  local _
  for _ in $(seq 300); do
    pid_running "$dir/$node/postmaster.pid" || { echo "$at"; return; }
    sleep 0.1
  done
  die "the postmaster of $node still runs 30 seconds after SIGKILL"
}

# wait_primary waits up to 2 minutes for a primary that takes writes, other
# than $1 if given, and prints it. (After kill-primary, the node it killed
# takes none.)
wait_primary() {
  local _ at
  for _ in $(seq 1200); do
    for at in $(primary 2>/dev/null || true); do
      if [ "$at" != "${1:-}" ] && writable "$at"; then
        echo "$at"
        return
      fi
    done
    sleep 0.1
  done
  state >&2 || true
  die "no primary took writes within 2 minutes"
}

# switchover returns once the other node takes writes: the old primary then
# rejoins as the secondary on its own (wait for it with up). The monitor's
# perform_switchover can lose a deadlock against a keeper's report of its
# node ("deadlock detected"), which rolls it back whole: the request is
# then made again, up to three times, while the formation still has its
# old primary.
#
# pg_auto_failover 2.0 (Debian's) can assign the draining primary
# wait_primary for a moment, as the secondary leaves that state to be
# promoted (hapostgres/pg_auto_failover#774, fixed upstream by #1165): the
# old primary then turns synchronous replication off and commits on its
# own until it is demoted, and what it commits meanwhile is lost with its
# timeline. switchover says so and exits with status 3 (after printing
# the new primary, as on success): a run that counts commits cannot count
# on that switchover's.
switchover() {
  local old try since
  for try in 1 2 3; do
    wait_healthy
    old=$(primary)
    since=$(monitor "SELECT coalesce(max(eventid), 0) FROM pgautofailover.event")
    if server pg_autoctl perform switchover --pgdata "$dir/monitor" --formation default --wait 0 >>"$dir/monitor.log" 2>&1; then
      wait_primary "$old"
      if [ "$(monitor "SELECT count(*) FROM pgautofailover.event
                       WHERE eventid > $since AND nodeport = ${old#*:} AND 'wait_primary' IN (reportedstate, goalstate)")" != 0 ]; then
        echo "pgaf.sh: the monitor put the old primary ($old) in wait_primary during the switchover (pg_auto_failover#774): it committed without its secondary until demoted, and those commits are lost" >&2
        exit 3
      fi
      return
    fi
    grep -q "deadlock detected" <(tail -n 20 "$dir/monitor.log") && [ "$(primary)" = "$old" ] || break
    echo "pgaf.sh: the monitor lost a deadlock in perform switchover (try $try); asking again" >&2
  done
  state >&2 || true
  die "pg_autoctl perform switchover failed (log: $dir/monitor.log)"
}

down() {
  local part _
  for part in $nodes monitor; do
    [ -f "$dir/$part.pid" ] || continue
    pid_running "$dir/$part.pid" && kill -TERM -- "-$(cat "$dir/$part.pid")" 2>/dev/null || true
  done
  for part in $nodes monitor; do
    for _ in $(seq 100); do pid_running "$dir/$part.pid" || break; sleep 0.1; done
    if pid_running "$dir/$part.pid"; then kill -KILL -- "-$(cat "$dir/$part.pid")" 2>/dev/null || true; fi
  done
  drop_dir "$home"
}

case "${1:-}" in
  up) up ;;
  url) url ;;
  state) state ;;
  primary) primary ;;
  kill-primary) kill_primary ;;
  wait-primary) wait_primary ;;
  switchover) switchover ;;
  down) down ;;
  *) echo "usage: scripts/pgaf.sh up|url|state|primary|kill-primary|wait-primary|switchover|down" >&2; exit 2 ;;
esac
