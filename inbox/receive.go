package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgbox/pgbox/internal/recent"
	"github.com/pgbox/pgbox/internal/schemaerr"
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
}

const (
	statusPending = "pending"
	statusDone    = "done"
)

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
	return in.receive(ctx, in.pool, msgs, statusPending, true)
}

// ReceiveBatchTx is ReceiveBatch inside the caller's transaction.
func (in *Inbox) ReceiveBatchTx(ctx context.Context, tx pgx.Tx, msgs []Message) ([]Result, error) {
	return in.receive(ctx, tx, msgs, statusPending, false)
}

// receiveOne is Receive and ReceiveTx: receive for one message.
func (in *Inbox) receiveOne(ctx context.Context, db dbtx, msg Message, autocommit bool) (Outcome, error) {
	res, err := in.receive(ctx, db, []Message{msg}, statusPending, autocommit)
	if err != nil {
		return 0, err
	}
	return res[0].Outcome, res[0].Err
}

// batch is the columns of receiveSQL, one entry per distinct valid message.
type batch struct {
	ids, eventTypes, metadata []string
	keys                      []*string
	payloads, hashes          [][]byte
	maxAttempts               []int32
	index                     []int // position of each entry in the caller's slice
}

// receive stores msgs with status in one statement on db. autocommit says
// db is the pool, so that the statement's outcome is committed when it
// returns, and the ids it stored or found can be remembered (Config.RecentIDs).
//
// Its steps: prepare the batch (validation, repeats, the recent ids), store
// it (one statement), announce it, resolve the duplicates whose stored hash
// the statement did not return (a second statement, only for those),
// record conflicts (another, only for those), then remember and count the
// outcomes.
func (in *Inbox) receive(ctx context.Context, db dbtx, msgs []Message, status string, autocommit bool) ([]Result, error) {
	results := make([]Result, len(msgs))
	b, first := in.prepare(msgs, results)
	if len(b.ids) == 0 { // nothing new to ask: invalid, repeated or remembered
		if status == statusPending {
			in.count(ctx, results)
		}
		return results, nil
	}
	unresolved, err := in.store(ctx, db, &b, status, in.notifyInStatement(status, autocommit), results)
	if err != nil {
		return nil, err
	}
	in.notifyCommitted(status, autocommit, results)
	if len(unresolved) > 0 {
		if err := in.resolve(ctx, db, unresolved, &b, first, results); err != nil {
			return nil, err
		}
	}
	if err := in.recordConflicts(ctx, db, msgs, results); err != nil {
		return nil, err
	}
	if autocommit {
		in.remember(&b, results)
	}
	if status == statusPending { // Process counts once it has committed
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
func (in *Inbox) notifyInStatement(status string, autocommit bool) *string {
	var channel *string // NULL: no NOTIFY
	if status == statusPending && !autocommit && in.notifies.Allow() {
		channel = &in.channel
	}
	return channel
}

// notifyCommitted announces autocommitted pending messages, once the
// statement that stored them has returned, if it stored any.
func (in *Inbox) notifyCommitted(status string, autocommit bool, results []Result) {
	if autocommit && status == statusPending && anyAccepted(results) {
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

// store runs the statement that stores b's messages with status, and
// NOTIFYs channel unless it is nil. It marks each inserted message Accepted
// in results, and a duplicate whose stored hash it learnt Duplicate or
// Conflict; it returns the ids of the other duplicates, whose hash is still
// to be read (resolve).
func (in *Inbox) store(ctx context.Context, db dbtx, b *batch, status string, channel *string, results []Result) ([]string, error) {
	if len(b.ids) == 1 && b.keys[0] == nil && channel == nil {
		return in.storeOne(ctx, db, b, status, results)
	}
	return in.storeMany(ctx, db, b, status, channel, results)
}

// storeOne is store for one message without an ordering key or a NOTIFY,
// the common case (a broker hands over one at a time): a plain INSERT
// (receiveOneSQL), as cheap as the raw statement. A duplicate, rarer
// (redeliveries of recent messages are known without a round trip), costs
// a second one to read its stored hash.
func (in *Inbox) storeOne(ctx context.Context, db dbtx, b *batch, status string, results []Result) ([]string, error) {
	tag, err := db.Exec(ctx, in.q.receiveOne, in.cfg.Consumer, b.ids[0], b.eventTypes[0], b.payloads[0], b.hashes[0],
		b.metadata[0], b.maxAttempts[0], status)
	if err != nil {
		return nil, in.dbError(ctx, "receive", err)
	}
	if tag.RowsAffected() == 0 {
		return b.ids, nil
	}
	results[b.index[0]].Outcome = Accepted
	return nil, nil
}

// storeMany is store for any batch, with receiveSQL: it reads back a row
// per message that was not inserted, with the payload hash stored under its
// id, NULL if the stored row committed while the statement ran.
func (in *Inbox) storeMany(ctx context.Context, db dbtx, b *batch, status string, channel *string, results []Result) ([]string, error) {
	rows, err := db.Query(ctx, in.q.receive, in.cfg.Consumer, b.ids, b.eventTypes, b.payloads, b.hashes,
		b.metadata, b.keys, b.maxAttempts, status, channel, in.q.seqName)
	if err != nil {
		return nil, in.dbError(ctx, "receive", err)
	}
	defer rows.Close()
	for k := range b.ids {
		results[b.index[k]].Outcome = Accepted // unless listed below
	}
	var unresolved []string // duplicates whose stored hash was not visible
	for rows.Next() {
		var (
			ord    int
			stored []byte
		)
		if err := rows.Scan(&ord, &stored); err != nil {
			return nil, in.dbError(ctx, "receive", err)
		}
		if ord == 0 {
			continue // the row that runs the NOTIFY
		}
		k := ord - 1
		i := b.index[k]
		if stored == nil {
			results[i].Outcome = 0
			unresolved = append(unresolved, b.ids[k])
			continue
		}
		results[i] = in.compare(b.ids[k], stored, b.hashes[k])
	}
	if err := rows.Err(); err != nil {
		return nil, in.dbError(ctx, "receive", err)
	}
	return unresolved, nil
}

// resolve settles duplicates whose row committed while receiveSQL ran, by
// reading their stored hashes with a fresh snapshot.
func (in *Inbox) resolve(ctx context.Context, db dbtx, ids []string, b *batch, first map[string]int, results []Result) error {
	rows, err := db.Query(ctx, in.q.hash, in.cfg.Consumer, ids)
	if err != nil {
		return in.dbError(ctx, "read stored hashes", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id     string
			stored []byte
		)
		if err := rows.Scan(&id, &stored); err != nil {
			return in.dbError(ctx, "read stored hashes", err)
		}
		k := first[id]
		results[b.index[k]] = in.compare(id, stored, b.hashes[k])
	}
	if err := rows.Err(); err != nil {
		return in.dbError(ctx, "read stored hashes", err)
	}
	// An id neither inserted nor found was deleted (retention) in between:
	// it was held when we tried, so it is a duplicate.
	for _, id := range ids {
		if r := &results[b.index[first[id]]]; r.Outcome == 0 && r.Err == nil {
			r.Outcome = Duplicate
		}
	}
	return nil
}

// recordConflicts records in inbox_conflicts the messages of msgs whose
// result is a Conflict, with their payloads, in one statement on db, if
// there are any.
func (in *Inbox) recordConflicts(ctx context.Context, db dbtx, msgs []Message, results []Result) error {
	var conflicts struct {
		ids              []string
		hashes, payloads [][]byte
	}
	for i, r := range results {
		if r.Outcome == Conflict {
			sum := sha256.Sum256(msgs[i].Payload)
			conflicts.ids = append(conflicts.ids, msgs[i].ID)
			conflicts.hashes = append(conflicts.hashes, sum[:])
			conflicts.payloads = append(conflicts.payloads, nonNil(msgs[i].Payload))
		}
	}
	if len(conflicts.ids) > 0 {
		if _, err := db.Exec(ctx, in.q.logConflicts, in.cfg.Consumer, conflicts.ids, conflicts.hashes, conflicts.payloads); err != nil {
			return in.dbError(ctx, "record conflicts", err)
		}
	}
	return nil
}

// compare tells a redelivery of id from a conflicting reuse of it, by the
// payload hash stored and the one got.
func (in *Inbox) compare(id string, stored, got []byte) Result {
	if bytes.Equal(stored, got) {
		return Result{Outcome: Duplicate}
	}
	return Result{Outcome: Conflict, Err: &ConflictError{Consumer: in.cfg.Consumer, MessageID: id}}
}

// nonNil returns p, or an empty payload for nil: the columns are NOT NULL,
// and no payload is an empty one.
func nonNil(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

// add appends m, whose payload hash is hash, to the batch; index is its
// position in the caller's slice.
func (b *batch) add(m *Message, hash []byte, defaultMaxAttempts, index int) {
	payload := nonNil(m.Payload)
	var key *string
	if m.OrderingKey != "" {
		key = &m.OrderingKey
	}
	maxAttempts := m.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = defaultMaxAttempts
	}
	b.ids = append(b.ids, m.ID)
	b.eventTypes = append(b.eventTypes, m.EventType)
	b.payloads = append(b.payloads, payload)
	b.hashes = append(b.hashes, hash)
	b.metadata = append(b.metadata, encodeMetadata(m.Metadata))
	b.keys = append(b.keys, key)
	b.maxAttempts = append(b.maxAttempts, int32(min(maxAttempts, 1<<31-1)))
	b.index = append(b.index, index)
}

// dbError wraps a database error of op, explaining a missing or outdated
// schema (schemaerr.Explain).
func (in *Inbox) dbError(ctx context.Context, op string, err error) error {
	return fmt.Errorf("inbox: %s for consumer %q: %w", op, in.cfg.Consumer, schemaerr.Explain(ctx, in.pool, in.cfg.Schema, err))
}
