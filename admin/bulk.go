package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
)

// Count counts the messages matching f. With f.ReplayableOnly it counts
// what Replay would touch.
func (a *Admin) Count(ctx context.Context, f Filter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	var n int64
	if err := a.pool.QueryRow(ctx, a.q["count"], f.args()...).Scan(&n); err != nil {
		return 0, a.dbError(ctx, "count messages", err)
	}
	return n, nil
}

// ReplayOptions says which messages Replay replays, and how.
type ReplayOptions struct {
	// Actor is who replays, as the audit log records it. Defaults to
	// ProcessActor, field by field.
	Actor Actor

	// BatchSize is how many messages one statement replays. Defaults to
	// Config.BatchSize.
	BatchSize int

	// Filter selects the messages, read through Filter.ReplaySelection:
	// of those, only the replayable ones (dead, discarded, or pending after
	// a failure) are replayed, whatever the filter says, and discarded
	// ones only when the filter names them (by IDs, or with InboxDiscarded
	// in Statuses), so that a discard is not undone by a bulk replay of its
	// group. Defaults to the zero Filter: every dead or failing message of
	// every consumer.
	Filter Filter

	// Note is kept in each replayed message's history, for whoever looks
	// at it next. Defaults to none.
	Note string

	// ProgressFunc, if set, is called after each batch with how many
	// messages have been replayed so far. Defaults to nil: no reports.
	ProgressFunc func(replayed int64)
}

// Replay puts the messages opts.Filter selects that are dead, discarded
// (when named, see ReplayOptions.Filter), or pending after a failure back
// to pending, due now, with their attempts zeroed; their history is kept,
// the replay is added to it (with opts.Note, if any), and each row's
// replay counter goes up. Running and done messages are never touched. It
// works in batches of opts.BatchSize, each its own short statement, so a
// million-message replay never holds one giant lock or transaction. It
// returns how many messages it replayed, also when it fails part way.
func (a *Admin) Replay(ctx context.Context, opts ReplayOptions) (int64, error) {
	return a.replay(ctx, a.pool, opts)
}

// ReplayTx is Replay inside the caller's transaction: the replay takes
// effect if tx commits, and its batches hold their rows locked until then.
func (a *Admin) ReplayTx(ctx context.Context, tx pgx.Tx, opts ReplayOptions) (int64, error) {
	return a.replay(ctx, tx, opts)
}

func (a *Admin) replay(ctx context.Context, db dbtx, opts ReplayOptions) (int64, error) {
	if err := opts.Filter.Validate(); err != nil {
		return 0, err
	}
	size, err := a.batchSize("ReplayOptions.BatchSize", opts.BatchSize)
	if err != nil {
		return 0, err
	}
	e := auditEntry{action: AuditReplay, actor: opts.Actor, note: opts.Note, selection: opts.Filter}
	f := opts.Filter.ReplaySelection()
	return a.audited(ctx, db, e, func(auditID int64) (int64, error) {
		return a.inBatches(ctx, db, "replay", size, opts.ProgressFunc, a.seqBatches(a.q["replay"], replayLeftSQL, f, opts.Note, auditID))
	})
}

// DiscardOptions says which messages Discard sets aside, why, and how.
type DiscardOptions struct {
	// Actor is who discards, as the audit log records it. Defaults to
	// ProcessActor, field by field.
	Actor Actor

	// BatchSize is how many messages one statement discards. Defaults to
	// Config.BatchSize.
	BatchSize int

	// Filter selects the messages. Of those, only the dead ones are
	// discarded, whatever the filter says. Defaults to the zero Filter:
	// every dead message of every consumer.
	Filter Filter

	// ProgressFunc, if set, is called after each batch with how many
	// messages have been discarded so far. Defaults to nil: no reports.
	ProgressFunc func(discarded int64)

	// Reason says why, in each discarded message's history. Required.
	Reason string
}

// Discard sets aside the dead messages opts.Filter selects, recording
// opts.Reason in their history. A discarded message is kept (until purged)
// but never run, and no longer holds up its ordering key. It works in
// batches like Replay and returns how many messages it discarded.
func (a *Admin) Discard(ctx context.Context, opts DiscardOptions) (int64, error) {
	return a.discard(ctx, a.pool, opts)
}

// DiscardTx is Discard inside the caller's transaction: the discard takes
// effect if tx commits, and its batches hold their rows locked until then.
func (a *Admin) DiscardTx(ctx context.Context, tx pgx.Tx, opts DiscardOptions) (int64, error) {
	return a.discard(ctx, tx, opts)
}

func (a *Admin) discard(ctx context.Context, db dbtx, opts DiscardOptions) (int64, error) {
	if err := opts.Filter.Validate(); err != nil {
		return 0, err
	}
	if opts.Reason == "" {
		return 0, errors.New("discard: a reason is required, for whoever looks at these messages next")
	}
	size, err := a.batchSize("DiscardOptions.BatchSize", opts.BatchSize)
	if err != nil {
		return 0, err
	}
	e := auditEntry{action: AuditDiscard, actor: opts.Actor, note: opts.Reason, selection: opts.Filter}
	return a.audited(ctx, db, e, func(auditID int64) (int64, error) {
		return a.inBatches(ctx, db, "discard", size, opts.ProgressFunc, a.seqBatches(a.q["discard"], discardLeftSQL, opts.Filter, opts.Reason, auditID))
	})
}

// batchFunc runs one statement of a bulk operation on db, touching at most
// size rows, and returns how many it touched and whether more may remain.
type batchFunc func(ctx context.Context, db dbtx, size int) (n int64, more bool, err error)

// inBatches runs batch on db until it reports that nothing remains, and
// calls progress (if set) with the running total after each batch that
// touched something. On the pool each batch is a statement, and a
// transaction, of its own; on a caller's tx they all run in it. It returns
// how many rows the batches touched, also when one fails.
func (a *Admin) inBatches(ctx context.Context, db dbtx, op string, size int, progress func(int64), batch batchFunc) (int64, error) {
	var total int64
	for {
		n, more, err := batch(ctx, db, size)
		if err != nil {
			return total, a.dbError(ctx, op, err)
		}
		total += n
		if progress != nil && n > 0 {
			progress(total)
		}
		if !more {
			return total, nil
		}
	}
}

// seqBatches returns the batches of query (replayBatchSQL or
// discardBatchSQL), which walk forward by seq from the start: each resumes
// after the highest seq the one before touched, and the walk ends with a
// batch that touches nothing. A replayed message still matches the filter
// (pending, with its last error), so it is the walk, not the filter, that
// keeps it from being replayed twice. Each batch counts its rows in audit
// record auditID.
//
// Interrupted between two batches (ctx done), the walk ends as complete,
// with no error, when nothing is left to it: its last batch was short (its
// scan found no more rows), or leftSQL (replayLeftSQL or discardLeftSQL)
// finds none beyond it. Otherwise it ends with ctx's error, without
// starting another batch.
func (a *Admin) seqBatches(query, leftSQL string, f Filter, note string, auditID int64) batchFunc {
	after := int64(-1)
	started, full := false, false
	return func(ctx context.Context, db dbtx, size int) (int64, bool, error) {
		if started && ctx.Err() != nil {
			if !full || !a.stillLeft(ctx, db, leftSQL, append(f.args(), after)...) {
				return 0, false, nil
			}
			return 0, false, ctx.Err()
		}
		seqs, err := seqBatch(ctx, db, query, f, after, size, note, auditID)
		if err != nil {
			return 0, false, err
		}
		for _, s := range seqs {
			after = max(after, s)
		}
		started, full = true, len(seqs) >= size
		return int64(len(seqs)), len(seqs) > 0, nil
	}
}

// seqBatch runs one batch of query (replayBatchSQL or discardBatchSQL):
// at most size rows matching f above seq after, with note, counted in
// audit record auditID (0: none). It returns the seqs of the rows it
// changed.
func seqBatch(ctx context.Context, db dbtx, query string, f Filter, after int64, size int, note string, auditID int64) ([]int64, error) {
	var audit any
	if auditID != 0 {
		audit = auditID
	}
	rows, err := db.Query(ctx, query, slices.Concat(f.args(), []any{after, size, note, audit})...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// IDStatuses returns the status of each of ids that consumer holds; an id
// missing from the result does not exist.
func (a *Admin) IDStatuses(ctx context.Context, consumer string, ids []string) (map[string]pgbox.InboxStatus, error) {
	rows, err := a.pool.Query(ctx, a.q["idStatus"], consumer, ids)
	if err != nil {
		return nil, a.dbError(ctx, "look up messages", err)
	}
	out := map[string]pgbox.InboxStatus{}
	var (
		id     string
		status pgbox.InboxStatus
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &status}, func() error {
		out[id] = status
		return nil
	})
	if err != nil {
		return nil, a.dbError(ctx, "look up messages", err)
	}
	return out, nil
}

// PurgeOptions says which messages Purge deletes, and how.
type PurgeOptions struct {
	// Actor is who purges, as the audit log records it. Defaults to
	// ProcessActor, field by field.
	Actor Actor

	// BatchSize is how many messages one statement deletes. Defaults to
	// Config.BatchSize.
	BatchSize int

	// Consumer keeps one consumer's messages. Defaults to "": every
	// consumer's.
	Consumer string

	// OlderThan keeps the messages processed (discarded ones: received)
	// more than this long ago, by the database clock. Keep it longer than
	// any producer's or broker's redelivery window. Defaults to 0: every
	// message in Status, however recent.
	OlderThan time.Duration

	// ProgressFunc, if set, is called after each batch with how many
	// messages have been deleted so far. Defaults to nil: no reports.
	ProgressFunc func(deleted int64)

	// Status is the status of the messages to delete: pgbox.InboxDone or
	// pgbox.InboxDiscarded. Dead messages are never purged: replay or
	// discard them first. Required.
	Status pgbox.InboxStatus
}

// validate reports options Purge refuses.
func (o PurgeOptions) validate() error {
	if o.Status != pgbox.InboxDone && o.Status != pgbox.InboxDiscarded {
		return fmt.Errorf("only done or discarded messages can be purged, not %q: dead ones are kept until an operator replays or discards them", o.Status)
	}
	return nil
}

// CountPurgeable counts the messages Purge(ctx, opts) would delete now.
// It ignores opts.BatchSize and opts.ProgressFunc.
func (a *Admin) CountPurgeable(ctx context.Context, opts PurgeOptions) (int64, error) {
	if err := opts.validate(); err != nil {
		return 0, err
	}
	var n int64
	err := a.pool.QueryRow(ctx, a.q["countPurgeable"], opts.OlderThan.Milliseconds(), string(opts.Status), nullable(opts.Consumer)).Scan(&n)
	if err != nil {
		return 0, a.dbError(ctx, "count messages", err)
	}
	return n, nil
}

// Purge deletes the messages in opts.Status (done or discarded) processed
// (discarded ones: received) more than opts.OlderThan ago, of
// opts.Consumer (or every consumer), in batches. A row locked by someone
// else is skipped. Deleting a done message ends its dedupe: a redelivery
// after that is stored and handled again, so keep OlderThan longer than any
// producer's retry window. It returns how many it deleted, also when it
// fails part way.
func (a *Admin) Purge(ctx context.Context, opts PurgeOptions) (int64, error) {
	return a.purge(ctx, a.pool, opts)
}

// PurgeTx is Purge inside the caller's transaction: the messages are gone
// if tx commits, and its batches hold their rows locked until then. For a
// large purge prefer Purge, whose batches each commit on their own.
func (a *Admin) PurgeTx(ctx context.Context, tx pgx.Tx, opts PurgeOptions) (int64, error) {
	return a.purge(ctx, tx, opts)
}

func (a *Admin) purge(ctx context.Context, db dbtx, opts PurgeOptions) (int64, error) {
	if err := opts.validate(); err != nil {
		return 0, err
	}
	size, err := a.batchSize("PurgeOptions.BatchSize", opts.BatchSize)
	if err != nil {
		return 0, err
	}
	olderThan, status, consumer := opts.OlderThan.Milliseconds(), string(opts.Status), nullable(opts.Consumer)
	e := auditEntry{action: AuditPurge, actor: opts.Actor, selection: purgeSelection{
		Consumer: opts.Consumer, OlderThan: opts.OlderThan.String(), Status: opts.Status}}
	return a.audited(ctx, db, e, func(auditID int64) (int64, error) {
		return a.inBatches(ctx, db, "purge", size, opts.ProgressFunc, a.countBatch(a.q["purge"], func(size int) []any {
			return []any{olderThan, status, size, consumer, auditID}
		}, purgeLeftSQL, olderThan, status, consumer))
	})
}

// purgeSelection is a purge's selection in the audit log.
type purgeSelection struct {
	Consumer  string            `json:"consumer,omitzero"`
	OlderThan string            `json:"older_than"`
	Status    pgbox.InboxStatus `json:"status"`
}

// countBatch returns the batches of query (purgeBatchSQL or
// outboxRetrySQL), which take args(size) and return how many rows they
// changed; a full batch means more may remain. A changed row leaves the
// selection, so each batch takes the first rows still in it.
//
// Interrupted after a full batch (ctx done), the change ends as complete,
// with no error, when leftSQL (purgeLeftSQL or outboxRetryLeftSQL), given
// leftArgs, finds nothing left: the interruption came during its last
// batch. Otherwise it ends with ctx's error, without starting another
// batch.
func (a *Admin) countBatch(query string, args func(size int) []any, leftSQL string, leftArgs ...any) batchFunc {
	started := false
	return func(ctx context.Context, db dbtx, size int) (int64, bool, error) {
		if started && ctx.Err() != nil {
			if !a.stillLeft(ctx, db, leftSQL, leftArgs...) {
				return 0, false, nil
			}
			return 0, false, ctx.Err()
		}
		started = true
		var n int64
		if err := db.QueryRow(ctx, query, args(size)...).Scan(&n); err != nil {
			return 0, false, err
		}
		return n, n >= int64(size), nil
	}
}
