package pgbox

import (
	"fmt"
	"slices"
	"strings"
)

// InboxStatus is where an inbox message is in its life, as stored in the
// inbox's status column. Use the constants: a misspelt status does not
// compile.
type InboxStatus string

// The statuses of an inbox message.
const (
	// InboxPending is a message waiting to be claimed: new, or backing off
	// after a failed attempt (then it has a last error), or snoozed.
	InboxPending InboxStatus = "pending"
	// InboxRunning is a message claimed by a worker for a leased handler,
	// or one whose lease expired and that waits to be rescued.
	InboxRunning InboxStatus = "running"
	// InboxDone is a message whose handler succeeded. Done messages are the
	// dedupe memory, kept for the retention window.
	InboxDone InboxStatus = "done"
	// InboxDead is a message out of attempts, or failed with a permanent
	// error. It stays until an operator replays or discards it, and holds
	// up the later messages of its ordering key meanwhile.
	InboxDead InboxStatus = "dead"
	// InboxDiscarded is a dead message an operator set aside. It is kept
	// (until purged) but never run, and no longer holds up its key.
	InboxDiscarded InboxStatus = "discarded"
)

// InboxStatuses returns every InboxStatus, in the order of a message's life.
func InboxStatuses() []InboxStatus {
	return []InboxStatus{InboxPending, InboxRunning, InboxDone, InboxDead, InboxDiscarded}
}

// ParseInboxStatus returns the InboxStatus named s, or an error that lists
// the valid ones.
func ParseInboxStatus(s string) (InboxStatus, error) {
	return parseStatus(s, InboxStatuses())
}

// OutboxStatus is where an outbox message is in its life, as stored in the
// outbox's status column.
type OutboxStatus string

// The statuses of an outbox message.
const (
	// OutboxPending is a message waiting to be published: new, or backing
	// off after a failed publish.
	OutboxPending OutboxStatus = "pending"
	// OutboxRunning is a message a relay has claimed and is publishing.
	OutboxRunning OutboxStatus = "running"
	// OutboxPublished is a message the broker acknowledged, kept for the
	// retention window.
	OutboxPublished OutboxStatus = "published"
	// OutboxDead is a message out of publish attempts. It stays until an
	// operator retries it, and holds up the later messages of its ordering
	// key meanwhile.
	OutboxDead OutboxStatus = "dead"
)

// OutboxStatuses returns every OutboxStatus, in the order of a message's life.
func OutboxStatuses() []OutboxStatus {
	return []OutboxStatus{OutboxPending, OutboxRunning, OutboxPublished, OutboxDead}
}

// ParseOutboxStatus returns the OutboxStatus named s, or an error that
// lists the valid ones.
func ParseOutboxStatus(s string) (OutboxStatus, error) {
	return parseStatus(s, OutboxStatuses())
}

// parseStatus finds s among valid.
func parseStatus[S ~string](s string, valid []S) (S, error) {
	if i := slices.Index(valid, S(s)); i >= 0 {
		return valid[i], nil
	}
	names := make([]string, len(valid))
	for i, v := range valid {
		names[i] = string(v)
	}
	return "", fmt.Errorf("unknown status %q: use one of %s", s, strings.Join(names, ", "))
}
