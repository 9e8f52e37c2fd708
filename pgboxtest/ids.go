package pgboxtest

import (
	"time"

	"github.com/pgbox/pgbox/internal/partition"
)

// MessageIDAt returns a new message id as pgbox's outbox makes them, a
// UUIDv7, made at t. The inbox and outbox keep such a message in the
// partition of t's day (UTC), and drop it with that partition once it is
// past retention: a test of what a long-running service keeps, or of a
// redelivery days later, needs ids of other days than today.
func MessageIDAt(t time.Time) string {
	return partition.IDAt(t).String()
}
