// Package tables is the one place that knows the rules of pgbox's tables
// which several packages' SQL share: the statuses as SQL
// literals, the sets of statuses a rule names, and the ordering-key rules.
//
// Queries concatenate these constants instead of spelling a status or a
// rule out again, so a misspelt status does not compile and a rule changed
// here changes in every query that applies it. The literals stay literals
// in the rendered SQL (never parameters): the planner matches them against
// the partial indexes' predicates, which a parameter in a generic plan
// cannot do.
//
// The fragments that read a row name it by the alias every query gives it:
// i for the inbox, o for the outbox. Like every query, they name tables as
// "/* schema */inbox", rendered by ident.Render.
package tables

import "github.com/pgbox/pgbox"

// The inbox statuses as SQL literals, such as 'pending'. Statuses are
// plain words, so no quote inside needs escaping (TestLiteralsAreWords).
const (
	InboxPending   = "'" + string(pgbox.InboxPending) + "'"
	InboxRunning   = "'" + string(pgbox.InboxRunning) + "'"
	InboxDone      = "'" + string(pgbox.InboxDone) + "'"
	InboxDead      = "'" + string(pgbox.InboxDead) + "'"
	InboxDiscarded = "'" + string(pgbox.InboxDiscarded) + "'"
)

// The outbox statuses as SQL literals.
const (
	OutboxPending   = "'" + string(pgbox.OutboxPending) + "'"
	OutboxRunning   = "'" + string(pgbox.OutboxRunning) + "'"
	OutboxPublished = "'" + string(pgbox.OutboxPublished) + "'"
	OutboxDead      = "'" + string(pgbox.OutboxDead) + "'"
)

// The ordering-key rules. A keyed message may be claimed (inbox) or
// published (outbox) only at the head of its key: while no earlier message
// of the key is pending, running or dead. That keeps one message per key in
// flight across every worker and process, in seq order; a retrying or dead
// head holds up only its own key, and a discarded one holds up nothing.
// inbox_ordering_idx and outbox_ordering_idx cover exactly these rows.
const (
	// InboxHoldsKey is the set of statuses in which an inbox message holds
	// up the later messages of its ordering key.
	InboxHoldsKey = "(" + InboxPending + ", " + InboxRunning + ", " + InboxDead + ")"
	// OutboxHoldsKey is the same set for the outbox.
	OutboxHoldsKey = "(" + OutboxPending + ", " + OutboxRunning + ", " + OutboxDead + ")"

	// InboxAtKeyHead is true for an inbox row i that is unkeyed or at the
	// head of its key.
	InboxAtKeyHead = `(i.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM /* schema */inbox AS earlier
            WHERE earlier.consumer = i.consumer
              AND earlier.ordering_key = i.ordering_key
              AND earlier.status IN ` + InboxHoldsKey + `
              AND earlier.seq < i.seq))`
	// OutboxAtKeyHead is true for an outbox row o that is unkeyed or at the
	// head of its key.
	OutboxAtKeyHead = `(o.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM /* schema */outbox AS earlier
            WHERE earlier.ordering_key = o.ordering_key
              AND earlier.status IN ` + OutboxHoldsKey + `
              AND earlier.seq < o.seq))`

	// InboxBehindDead is true for an inbox row i held up by a dead message
	// of its key: it waits for an operator (replay or discard the dead
	// head), not for a worker or for time, so backlog ages and drain waits
	// leave it out.
	InboxBehindDead = `(i.ordering_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM /* schema */inbox AS d
            WHERE d.consumer = i.consumer AND d.ordering_key = i.ordering_key
              AND d.status = ` + InboxDead + ` AND d.seq < i.seq))`
	// OutboxBehindDead is true for an outbox row o held up by a dead row of
	// its key.
	OutboxBehindDead = `(o.ordering_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM /* schema */outbox AS d
            WHERE d.ordering_key = o.ordering_key
              AND d.status = ` + OutboxDead + ` AND d.seq < o.seq))`
)

// InboxFailing is true for an inbox row i that failed and has not been
// handled since: dead, or pending again after a failed attempt (backing
// off; it has a last error). inbox_failed_idx covers these rows and the
// discarded ones.
const InboxFailing = `(i.status = ` + InboxDead + ` OR (i.status = ` + InboxPending + ` AND i.last_error IS NOT NULL))`

// IdempotencyKeyFree is true for an idempotency key (package idempotency)
// that no request holds: done, or its request's lease ran out. Once such a
// key has expired, a request that brings it again starts afresh, and
// retention may delete it.
const IdempotencyKeyFree = `(state = 'done' OR locked_until <= now())`
