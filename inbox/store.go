package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/schemaerr"
)

// batch is the columns of the batch receives (receiveSQL), one entry per
// distinct valid message.
type batch struct {
	ids, eventTypes, metadata []string
	keys                      []*string
	payloads, hashes          [][]byte
	maxAttempts               []int32
	days                      []int32 // the day of a UUIDv7 id or of a foreign id's IDTime, 0 (before any origin day: undated) for any other
	foreign                   []bool  // the day is a foreign id's IDTime's (a dated foreign id)
	index                     []int   // position of each entry in the caller's slice
	keyed                     bool    // some message has an ordering key
	dated                     bool    // some message is a dated foreign id
	probeless                 bool    // the last store did not probe the earlier generations (storeOne)
}

// newBatch returns a batch with room for n messages.
func newBatch(n int) batch {
	return batch{
		ids: make([]string, 0, n), eventTypes: make([]string, 0, n), metadata: make([]string, 0, n),
		keys: make([]*string, 0, n), payloads: make([][]byte, 0, n), hashes: make([][]byte, 0, n),
		maxAttempts: make([]int32, 0, n), days: make([]int32, 0, n), foreign: make([]bool, 0, n), index: make([]int, 0, n),
	}
}

// add appends m, whose payload hash is hash, to the batch; index is its
// position in the caller's slice.
func (b *batch) add(m *Message, hash []byte, defaultMaxAttempts, index int) {
	payload := nonNil(m.Payload)
	var key *string
	if m.OrderingKey != "" {
		key = &m.OrderingKey
		b.keyed = true
	}
	maxAttempts := m.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = defaultMaxAttempts
	}
	day, v7 := partition.IDDay(m.ID)
	foreign := !v7 && !m.IDTime.IsZero() // a UUIDv7's own time wins: a relay republishes it with a new broker time
	if foreign {
		day = partition.DayOf(m.IDTime)
		b.dated = true
	}
	b.ids = append(b.ids, m.ID)
	b.eventTypes = append(b.eventTypes, m.EventType)
	b.payloads = append(b.payloads, payload)
	b.hashes = append(b.hashes, hash)
	b.metadata = append(b.metadata, encodeMetadata(m.Metadata))
	b.keys = append(b.keys, key)
	b.maxAttempts = append(b.maxAttempts, int32(min(maxAttempts, 1<<31-1)))
	b.days = append(b.days, int32(day))
	b.foreign = append(b.foreign, foreign)
	b.index = append(b.index, index)
}

// store runs the statement that stores b's messages with status, and
// NOTIFYs channel unless it is nil. It marks each inserted message Accepted
// in results, and a duplicate whose stored hash it learnt Duplicate or
// Conflict; it returns the ids of the other duplicates, whose hash is still
// to be read (resolve).
func (in *Inbox) store(ctx context.Context, db dbtx, b *batch, status pgbox.InboxStatus, channel *string, results []Result) ([]string, error) {
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
//
// Unless the message needs it, the INSERT does not probe the earlier
// generations (receiveOneFirstSQL): a dated message never does, and an
// undated one only once the inbox is past generation 0, which this Inbox
// learns (laterOrigin) from the first undated message that the INSERT
// without the probe could not place (resolve). A dated foreign id has
// probes of its own (receiveOneDatedSQL).
func (in *Inbox) storeOne(ctx context.Context, db dbtx, b *batch, status pgbox.InboxStatus, results []Result) ([]string, error) {
	sql := in.q.receiveOne
	b.probeless = !b.dated && b.days[0] >= in.laterOrigin.Load()
	switch {
	case b.dated:
		sql = in.q.receiveOneDated
	case b.probeless:
		sql = in.q.receiveOneFirst
	}
	tag, err := db.Exec(ctx, sql, in.cfg.Consumer, b.ids[0], b.eventTypes[0], b.payloads[0], b.hashes[0],
		b.metadata[0], b.maxAttempts[0], string(status), b.days[0])
	if err != nil {
		return nil, in.dbError(ctx, "receive", err)
	}
	if tag.RowsAffected() == 0 {
		return b.ids, nil
	}
	results[b.index[0]].Outcome = Accepted
	return nil, nil
}

// storeMany is store for any batch, with receiveSQL (receiveKeylessSQL
// when no message has an ordering key, and the Dated variants of both when
// a message is a dated foreign id): it reads back a row per message
// that was not inserted, with the payload hash stored under its id, NULL
// if the stored row committed while the statement ran.
//
// The arrays of bytes and of optional keys go as pgtype.FlatArray, which
// pgx encodes without reflection.
func (in *Inbox) storeMany(ctx context.Context, db dbtx, b *batch, status pgbox.InboxStatus, channel *string, results []Result) ([]string, error) {
	args := []any{in.cfg.Consumer, b.ids, b.eventTypes, pgtype.FlatArray[[]byte](b.payloads), pgtype.FlatArray[[]byte](b.hashes),
		b.metadata, pgtype.FlatArray[*string](b.keys), b.maxAttempts, string(status), channel, b.days}
	sql := in.q.receiveKeyless
	if b.keyed {
		sql, args = in.q.receive, append(args, in.q.seqName)
	}
	if b.dated { // the flags are the last parameter
		sql, args = in.q.receiveKeylessDated, append(args, b.foreign)
		if b.keyed {
			sql = in.q.receiveDated
		}
	}
	b.probeless = false
	rows, err := db.Query(ctx, sql, args...)
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
			placed *int64
		)
		if err := rows.Scan(&ord, &stored, &placed); err != nil {
			return nil, in.dbError(ctx, "receive", err)
		}
		if ord == 0 { // the row that runs the NOTIFY
			if placed == nil || *placed != int64(len(b.ids)) {
				return nil, in.noLayoutError("receive")
			}
			continue
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
// reading their stored hashes with a fresh snapshot. It reports again if
// the message is to be stored again: one that storeOne did not place
// because it is undated and the inbox is past generation 0.
func (in *Inbox) resolve(ctx context.Context, db dbtx, ids []string, b *batch, first map[string]int, results []Result) (again bool, err error) {
	rows, err := db.Query(ctx, in.q.hash, in.cfg.Consumer, ids)
	if err != nil {
		return false, in.dbError(ctx, "read stored hashes", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id     string
			stored []byte
		)
		if err := rows.Scan(&id, &stored); err != nil {
			return false, in.dbError(ctx, "read stored hashes", err)
		}
		k := first[id]
		results[b.index[k]] = in.compare(id, stored, b.hashes[k])
	}
	if err := rows.Err(); err != nil {
		return false, in.dbError(ctx, "read stored hashes", err)
	}
	// An id neither inserted nor found was deleted (retention) in between:
	// it was held when we tried, so it is a duplicate. Unless no receive
	// can place a message at all (see noLayoutError), or storeOne's INSERT
	// could not place this one without a probe: a single message then
	// looks like one.
	var gone []*Result
	for _, id := range ids {
		if r := &results[b.index[first[id]]]; r.Outcome == 0 && r.Err == nil {
			gone = append(gone, r)
		}
	}
	if len(gone) == 0 {
		return false, nil
	}
	var generation, origin int32
	switch err := db.QueryRow(ctx, in.q.layout).Scan(&generation, &origin); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, in.noLayoutError("receive")
	case err != nil:
		return false, in.dbError(ctx, "read stored hashes", err)
	case b.probeless && generation != 0 && b.days[0] < origin:
		in.laterOrigin.Store(origin)
		return true, nil
	}
	for _, r := range gone {
		r.Outcome = Duplicate
	}
	return false, nil
}

// noLayoutError is the error of a receive that could place no message in
// a partition, and so stored none: the partitioning table has lost the
// inbox's row, which migration 9 writes and nothing of pgbox's deletes.
func (in *Inbox) noLayoutError(op string) error {
	return fmt.Errorf("inbox: %s for consumer %q: nothing was stored: %s.partitioning has no row for the inbox, which says "+
		"which partition each message goes in (migration 9 wrote it, and something has deleted it since); "+
		"restore that row from a backup of the schema, as it was, before receiving again", op, in.cfg.Consumer, in.cfg.Schema)
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

// dbError wraps a database error of op, explaining a missing or outdated
// schema (schemaerr.Explain) and an undated message received in a
// transaction that is not READ COMMITTED (see receiveSQL).
func (in *Inbox) dbError(ctx context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.Contains(pgErr.Message, readCommittedError) {
		return fmt.Errorf("inbox: %s for consumer %q: %w: a message whose id is no UUIDv7 is deduped across the inbox's generations only with a fresh snapshot per statement; "+
			"receive it in a READ COMMITTED transaction (the default) or with Receive (%v)", op, in.cfg.Consumer, ErrNeedsReadCommitted, err)
	}
	return fmt.Errorf("inbox: %s for consumer %q: %w", op, in.cfg.Consumer, schemaerr.Explain(ctx, in.pool, in.cfg.Schema, err))
}
