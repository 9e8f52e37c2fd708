package admin

import (
	"context"
	"fmt"
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

// Replay puts the messages matching f that are dead, discarded, or pending
// after a failure back to pending, due now, with their attempts zeroed;
// their history is kept, the replay is added to it (with note, if any), and
// each row's replay counter goes up. Running and done messages are never
// touched. It works in batches of opts.BatchSize, each its own short
// statement, so a million-message replay never holds one giant lock or
// transaction. It returns how many messages it replayed.
func (a *Admin) Replay(ctx context.Context, f Filter, note string, opts BatchOptions) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	return a.batches(ctx, "replay", a.q["replay"], f, note, opts)
}

// Discard sets aside the dead messages matching f, recording reason in
// their history. A discarded message is kept (until purged) but never run,
// and no longer holds up its ordering key. It works in batches like Replay
// and returns how many messages it discarded.
func (a *Admin) Discard(ctx context.Context, f Filter, reason string, opts BatchOptions) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if reason == "" {
		return 0, fmt.Errorf("discard: a reason is required, for whoever looks at these messages next")
	}
	return a.batches(ctx, "discard", a.q["discard"], f, reason, opts)
}

// batches runs query (replayBatchSQL or discardBatchSQL) until it touches
// nothing, walking forward by seq.
func (a *Admin) batches(ctx context.Context, op, query string, f Filter, note string, opts BatchOptions) (int64, error) {
	size := opts.BatchSize
	if size <= 0 {
		size = a.cfg.BatchSize
	}
	var (
		total int64
		after int64 = -1
	)
	for {
		rows, err := a.pool.Query(ctx, query, append(f.args(), after, size, note)...)
		if err != nil {
			return total, a.dbError(ctx, op, err)
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return total, a.dbError(ctx, op, err)
		}
		if len(seqs) == 0 {
			return total, nil
		}
		total += int64(len(seqs))
		for _, s := range seqs {
			after = max(after, s)
		}
		if opts.Progress != nil {
			opts.Progress(total)
		}
	}
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

// purgeable reports whether status may be purged.
func purgeable(status pgbox.InboxStatus) error {
	if status != pgbox.InboxDone && status != pgbox.InboxDiscarded {
		return fmt.Errorf("only done or discarded messages can be purged, not %q: dead ones are kept until an operator replays or discards them", status)
	}
	return nil
}

// CountPurgeable counts the messages in status (done or discarded) older
// than olderThan, of consumer ("" for all), that Purge would delete.
func (a *Admin) CountPurgeable(ctx context.Context, status pgbox.InboxStatus, olderThan time.Duration, consumer string) (int64, error) {
	if err := purgeable(status); err != nil {
		return 0, err
	}
	var n int64
	err := a.pool.QueryRow(ctx, a.q["countPurgeable"], olderThan.Milliseconds(), string(status), nullable(consumer)).Scan(&n)
	if err != nil {
		return 0, a.dbError(ctx, "count messages", err)
	}
	return n, nil
}

// Purge deletes the messages in status (done or discarded) processed
// (discarded ones: received) more than olderThan ago, of consumer ("" for
// all), in batches. Deleting a done message ends its dedupe: a redelivery
// after that is stored and handled again, so keep olderThan longer than any
// producer's retry window. It returns how many it deleted.
func (a *Admin) Purge(ctx context.Context, status pgbox.InboxStatus, olderThan time.Duration, consumer string, opts BatchOptions) (int64, error) {
	if err := purgeable(status); err != nil {
		return 0, err
	}
	size := opts.BatchSize
	if size <= 0 {
		size = a.cfg.BatchSize
	}
	var total int64
	for {
		tag, err := a.pool.Exec(ctx, a.q["purge"], olderThan.Milliseconds(), string(status), size, nullable(consumer))
		if err != nil {
			return total, a.dbError(ctx, "purge", err)
		}
		total += tag.RowsAffected()
		if opts.Progress != nil && tag.RowsAffected() > 0 {
			opts.Progress(total)
		}
		if tag.RowsAffected() < int64(size) {
			return total, nil
		}
	}
}

// FailureGroup is the dead and failing messages of one consumer that share
// an event type and an error fingerprint.
type FailureGroup struct {
	Consumer    string    `json:"consumer"`
	Count       int64     `json:"count"`
	Dead        int64     `json:"dead"`
	Error       string    `json:"error"`
	EventType   string    `json:"event_type"`
	Failing     int64     `json:"failing"`
	Fingerprint string    `json:"fingerprint"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
	Normalized  string    `json:"normalized_error"`
	SampleID    string    `json:"sample_id"`
}

// Failures groups the dead and failing (pending after a failure) messages
// of consumer ("" for all) by event type and error fingerprint: the error
// text with ids, quoted values, numbers and timestamps replaced by
// placeholders. Largest groups first, at most limit of them. Replay a group
// with Filter.Fingerprint.
func (a *Admin) Failures(ctx context.Context, consumer string, limit int) ([]FailureGroup, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := a.pool.Query(ctx, a.q["failures"], nullable(consumer), limit)
	if err != nil {
		return nil, a.dbError(ctx, "group failures", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailureGroup, error) {
		var g FailureGroup
		var sample *string
		err := r.Scan(&g.Consumer, &g.EventType, &g.Fingerprint, &g.Normalized, &g.Count, &g.Dead,
			&g.FirstSeen, &g.LastSeen, &g.SampleID, &sample)
		if sample != nil {
			g.Error = *sample
		}
		g.Failing = g.Count - g.Dead
		return g, err
	})
	if err != nil {
		return nil, a.dbError(ctx, "group failures", err)
	}
	return out, nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
