package inbox

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/recent"
)

// Outcome says what receiving a message did.
type Outcome int

const (
	// Accepted means the message was new and is now stored.
	Accepted Outcome = iota + 1
	// Duplicate means the consumer already held the message (same id, same
	// payload): nothing was written. Acknowledge it to the broker.
	Duplicate
	// Conflict means the consumer already held a message with this id but a
	// different payload: nothing was stored and the error is a
	// *ConflictError.
	Conflict
)

// String returns "accepted", "duplicate" or "conflict".
func (o Outcome) String() string {
	switch o {
	case Accepted:
		return "accepted"
	case Duplicate:
		return "duplicate"
	case Conflict:
		return "conflict"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is what ReceiveBatch reports for one message.
type Result struct {
	// Err is nil for Accepted and Duplicate; a *ConflictError for
	// Conflict; and an error wrapping ErrInvalidMessage, with Outcome zero,
	// for a message that was rejected without being stored.
	Err error
	// Outcome is what happened to the message.
	Outcome Outcome
}

// dbtx is what the inbox needs of a pool or a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Receive stores msg as pending work for the dispatcher, unless the
// consumer already holds it. A duplicate is reported as Duplicate with a nil
// error; a conflicting reuse of the id as Conflict with a *ConflictError. A
// message that fails validation gets an error wrapping ErrInvalidMessage and
// writes nothing.
//
// A new message costs one round trip: a plain INSERT. A redelivery of an id
// this Inbox remembers (Config.RecentIDs) costs none; any other duplicate
// costs a second one, to compare its payload with the stored one.
func (in *Inbox) Receive(ctx context.Context, msg Message) (Outcome, error) {
	return in.receiveOne(ctx, in.pool, msg, true)
}

// ReceiveTx is Receive inside the caller's transaction: the message is
// stored, and idle dispatchers are woken, only if tx commits.
func (in *Inbox) ReceiveTx(ctx context.Context, tx pgx.Tx, msg Message) (Outcome, error) {
	return in.receiveOne(ctx, tx, msg, false)
}

// ReceiveBatch stores many messages in one round trip. Each gets its own
// Result, in the order given: one invalid or conflicting message is
// rejected alone and its neighbours are still stored. A message repeated
// within the batch is a Duplicate (or Conflict) of its first occurrence.
//
// The error is non-nil only when the database could not be used. Some of
// the messages may have been stored by then: deliver the batch again (a
// broker will), and those are reported as duplicates.
func (in *Inbox) ReceiveBatch(ctx context.Context, msgs []Message) ([]Result, error) {
	return in.receive(ctx, in.pool, msgs, pgbox.InboxPending, true)
}

// ReceiveBatchTx is ReceiveBatch inside the caller's transaction.
func (in *Inbox) ReceiveBatchTx(ctx context.Context, tx pgx.Tx, msgs []Message) ([]Result, error) {
	return in.receive(ctx, tx, msgs, pgbox.InboxPending, false)
}

// receiveOne is Receive and ReceiveTx: receive for one message.
func (in *Inbox) receiveOne(ctx context.Context, db dbtx, msg Message, autocommit bool) (Outcome, error) {
	res, err := in.receive(ctx, db, []Message{msg}, pgbox.InboxPending, autocommit)
	if err != nil {
		return 0, err
	}
	return res[0].Outcome, res[0].Err
}

// receive stores msgs with status in one statement on db. autocommit says
// db is the pool, so that the statement's outcome is committed when it
// returns, and the ids it stored or found can be remembered (Config.RecentIDs).
//
// Its steps: prepare the batch (validation, repeats, the recent ids), store
// it (one statement), resolve the duplicates whose stored hash the
// statement did not return (a second statement, only for those), announce
// it, record conflicts (another statement, only for those), then remember
// and count the outcomes. A message the store could not place without
// probing the earlier generations (Inbox.storeOne) is stored again, once,
// with a statement that does.
func (in *Inbox) receive(ctx context.Context, db dbtx, msgs []Message, status pgbox.InboxStatus, autocommit bool) ([]Result, error) {
	results := make([]Result, len(msgs))
	b, first := in.prepare(msgs, results)
	if len(b.ids) == 0 { // nothing new to ask: invalid, repeated or remembered
		if status == pgbox.InboxPending {
			in.count(ctx, results)
		}
		return results, nil
	}
	channel := in.notifyInStatement(status, autocommit)
	for again := true; again; {
		unresolved, err := in.store(ctx, db, &b, status, channel, results)
		if err != nil {
			return nil, err
		}
		again = false
		if len(unresolved) > 0 {
			if again, err = in.resolve(ctx, db, unresolved, &b, first, results); err != nil {
				return nil, err
			}
		}
	}
	in.notifyCommitted(status, autocommit, results)
	if err := in.recordConflicts(ctx, db, msgs, results); err != nil {
		return nil, err
	}
	if autocommit {
		in.remember(&b, results)
	}
	if status == pgbox.InboxPending { // Process counts once it has committed
		in.count(ctx, results)
	}
	return results, nil
}

// prepare gathers the messages of msgs that need the database into a
// batch, with first mapping each id to its entry. It settles the others in
// results without a round trip: an invalid message gets its error, a
// repeat of an earlier message of the batch is compared with it, and a
// redelivery of an id this Inbox remembers is a Duplicate.
func (in *Inbox) prepare(msgs []Message, results []Result) (b batch, first map[string]int) {
	b = newBatch(len(msgs))
	first = make(map[string]int, len(msgs)) // id → entry in b
	for i := range msgs {
		m := &msgs[i]
		if err := in.validate(m); err != nil {
			results[i].Err = err
			continue
		}
		sum := sha256.Sum256(m.Payload)
		if j, seen := first[m.ID]; seen {
			results[i] = in.compare(m.ID, b.hashes[j], sum[:])
			continue
		}
		if in.remembers(m.ID, sum) {
			// A redelivery of a message known to be committed: a
			// duplicate, without a round trip. A different payload goes to
			// the database, which records the conflict.
			results[i].Outcome = Duplicate
			continue
		}
		first[m.ID] = len(b.ids)
		b.add(m, sum[:], in.cfg.MaxAttempts, i)
	}
	return b, first
}

// remembers reports whether id is remembered as committed (Config.RecentIDs)
// with a payload whose hash is sum.
func (in *Inbox) remembers(id string, sum recent.Hash) bool {
	stored, ok := in.recent.Get(id)
	return ok && stored == sum
}

// remember adds the ids of b that the database stored or found to the
// recent ids, once their outcome is committed (autocommit): a redelivery
// of one is then answered without a round trip.
func (in *Inbox) remember(b *batch, results []Result) {
	for k, id := range b.ids {
		switch r := results[b.index[k]]; {
		case r.Err != nil: // a conflict: what is stored is another payload
		case r.Outcome == Accepted:
			in.recent.Add(id, recent.Hash(b.hashes[k]))
		default: // a duplicate: stored before the ids remembered
			in.recent.Fill(id, recent.Hash(b.hashes[k]))
		}
	}
}

// notifyInStatement returns the channel the storing statement is to
// NOTIFY, or nil for none.
//
// New pending messages wake the dispatchers. Received in the caller's
// transaction, they are announced by a NOTIFY in the statement (at most
// once per Config.NotifyInterval), which PostgreSQL delivers at that
// transaction's commit. Autocommitted, they are announced once the
// statement has returned, out of band (notifyCommitted, see
// notify.Limiter.Committed): a NOTIFY in the statement would make its
// commit queue for PostgreSQL's notification lock behind every other
// notifying commit, each through its own WAL flush.
func (in *Inbox) notifyInStatement(status pgbox.InboxStatus, autocommit bool) *string {
	var channel *string // NULL: no NOTIFY
	if status == pgbox.InboxPending && !autocommit && in.notifies.Allow() {
		channel = &in.channel
	}
	return channel
}

// notifyCommitted announces autocommitted pending messages, once the
// statement that stored them has returned, if it stored any.
func (in *Inbox) notifyCommitted(status pgbox.InboxStatus, autocommit bool, results []Result) {
	if autocommit && status == pgbox.InboxPending && anyAccepted(results) {
		in.notifies.Committed()
	}
}

// anyAccepted reports whether a result is a newly stored message.
func anyAccepted(results []Result) bool {
	for _, r := range results {
		if r.Outcome == Accepted && r.Err == nil {
			return true
		}
	}
	return false
}
