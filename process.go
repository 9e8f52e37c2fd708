package pgbox

import "time"

// ProcessKind is what a registered process runs, as stored in the
// processes table's kind column (inboxctl processes).
type ProcessKind string

// The kinds of process that register themselves while they run.
const (
	// ProcessDispatcher is a dispatcher.Dispatcher: it handles one
	// consumer's inbox messages.
	ProcessDispatcher ProcessKind = "dispatcher"
	// ProcessRelay is a relay.Relay: it publishes the outbox.
	ProcessRelay ProcessKind = "relay"
	// ProcessMaintainer is a maintenance.Maintainer: it takes part in the
	// election of the one process that runs the maintenance jobs.
	ProcessMaintainer ProcessKind = "maintainer"
)

// Liveness: every dispatcher, relay and maintainer records itself in the
// processes table when it starts, touches its row once per heartbeat while
// it runs, and deletes the row when it stops cleanly.
const (
	// ProcessHeartbeatDefault is how often a process touches its row unless
	// its Config says otherwise (ProcessHeartbeat).
	ProcessHeartbeatDefault = 10 * time.Second
	// ProcessHeartbeatMin is the shortest heartbeat a Config accepts.
	ProcessHeartbeatMin = 100 * time.Millisecond
	// ProcessDeadAfter is how many of its heartbeats a process may miss
	// before it counts as dead: a process not seen for longer than
	// ProcessDeadAfter times its heartbeat was killed, lost its database,
	// or hangs. With the default heartbeat that is 30 seconds.
	ProcessDeadAfter = 3
)
