package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ReplayState is where a scheduled replay is in its life, as stored in
// scheduled_replays' state column.
type ReplayState string

// The states of a scheduled replay.
const (
	// ReplayScheduled is a replay waiting for its time.
	ReplayScheduled ReplayState = "scheduled"
	// ReplayRunning is a replay under way: part of its messages are
	// replayed.
	ReplayRunning ReplayState = "running"
	// ReplayDone is a replay that has replayed every matching message that
	// was replayable.
	ReplayDone ReplayState = "done"
	// ReplayFailed is a replay that could not run (see
	// ScheduledReplay.Error); nothing more will be done.
	ReplayFailed ReplayState = "failed"
	// ReplayCancelled is a replay an operator cancelled before it started.
	ReplayCancelled ReplayState = "cancelled"
)

// ScheduledReplay is a replay an operator scheduled for later (inboxctl
// replay --at). The maintenance job (package maintenance) runs it once its
// time has come, by the database clock.
type ScheduledReplay struct {
	// CreatedAt is when it was scheduled.
	CreatedAt time.Time `json:"created_at"`
	// Error is why it failed.
	Error string `json:"error,omitzero"`
	// Filter selects the messages; of those, the ones replayable when it
	// runs are replayed.
	Filter Filter `json:"filter"`
	// FinishedAt is when it ended (done, failed or cancelled); nil until
	// then.
	FinishedAt *time.Time `json:"finished_at"`
	// ID identifies it, for CancelScheduledReplay.
	ID int64 `json:"id"`
	// Note is kept in each replayed message's history.
	Note string `json:"note,omitzero"`
	// Replayed counts the messages replayed so far.
	Replayed int64 `json:"replayed"`
	// RunAt is when it is due, by the database clock.
	RunAt time.Time `json:"run_at"`
	// StartedAt is when its first batch ran; nil until then.
	StartedAt *time.Time `json:"started_at"`
	// State is where the replay is in its life.
	State ReplayState `json:"state"`
}

// scan reads row, in scheduledReplayColumns' order, into r.
func (r *ScheduledReplay) scan(row pgx.Row) error {
	var filter []byte
	var lastError *string
	if err := row.Scan(&r.ID, &r.RunAt, &filter, &r.Note, &r.State, &r.Replayed,
		&r.CreatedAt, &r.StartedAt, &r.FinishedAt, &lastError); err != nil {
		return err
	}
	if lastError != nil {
		r.Error = *lastError
	}
	return json.Unmarshal(filter, &r.Filter)
}

// ScheduleReplayOptions says what a scheduled replay replays, and when.
type ScheduleReplayOptions struct {
	// At is when the replay is to run, judged by the database clock; a
	// time already past runs at the maintenance job's next check.
	// Required.
	At time.Time

	// Filter selects the messages. Of those, the ones replayable when the
	// replay runs are replayed (Filter.ReplayableOnly is set for it).
	// Defaults to the zero Filter: every replayable message then.
	Filter Filter

	// Note is kept in each replayed message's history, after the scheduled
	// replay's id. Defaults to none.
	Note string
}

// ScheduleReplay records a replay of the messages opts.Filter selects, to
// run at opts.At: the maintenance job then replays those still
// replayable, as Replay would, with opts.Note in their history. Nothing is
// changed until then, and CancelScheduledReplay can call it off.
func (a *Admin) ScheduleReplay(ctx context.Context, opts ScheduleReplayOptions) (*ScheduledReplay, error) {
	return a.scheduleReplay(ctx, a.pool, opts)
}

// ScheduleReplayTx is ScheduleReplay inside the caller's transaction: the
// replay is scheduled only if tx commits.
func (a *Admin) ScheduleReplayTx(ctx context.Context, tx pgx.Tx, opts ScheduleReplayOptions) (*ScheduledReplay, error) {
	return a.scheduleReplay(ctx, tx, opts)
}

func (a *Admin) scheduleReplay(ctx context.Context, db dbtx, opts ScheduleReplayOptions) (*ScheduledReplay, error) {
	f := opts.Filter
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if opts.At.IsZero() {
		return nil, errors.New("schedule replay: the time is zero")
	}
	f.ReplayableOnly = true
	filter, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("schedule replay: %w", err)
	}
	var r ScheduledReplay
	// The filter goes as text: pgx would send a []byte as bytea unless it
	// knew the parameter is jsonb, which the exec and simple_protocol query
	// modes never tell it.
	if err := r.scan(db.QueryRow(ctx, a.q["scheduleReplay"], opts.At, string(filter), opts.Note)); err != nil {
		return nil, a.dbError(ctx, "schedule replay", err)
	}
	return &r, nil
}

// ScheduledReplays lists scheduled replays: those waiting or under way
// first, soonest first, then finished ones, newest first; at most limit (0
// or less for ScheduledReplaysLimitDefault).
func (a *Admin) ScheduledReplays(ctx context.Context, limit int) ([]ScheduledReplay, error) {
	if limit <= 0 {
		limit = ScheduledReplaysLimitDefault
	}
	rows, err := a.pool.Query(ctx, a.q["scheduledReplays"], limit)
	if err != nil {
		return nil, a.dbError(ctx, "list scheduled replays", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ScheduledReplay, error) {
		var r ScheduledReplay
		err := r.scan(row)
		return r, err
	})
	if err != nil {
		return nil, a.dbError(ctx, "list scheduled replays", err)
	}
	return out, nil
}

// CountScheduledReplays counts the replays waiting for their time or under
// way.
func (a *Admin) CountScheduledReplays(ctx context.Context) (int64, error) {
	var n int64
	if err := a.pool.QueryRow(ctx, a.q["countScheduled"]).Scan(&n); err != nil {
		return 0, a.dbError(ctx, "count scheduled replays", err)
	}
	return n, nil
}

// CancelScheduledReplay calls off scheduled replay id before it starts. It
// returns an error wrapping ErrNotFound when there is no such replay, and
// an error when it has already started or ended.
func (a *Admin) CancelScheduledReplay(ctx context.Context, id int64) error {
	return a.cancelScheduledReplay(ctx, a.pool, id)
}

// CancelScheduledReplayTx is CancelScheduledReplay inside the caller's
// transaction: the replay is called off only if tx commits. Until then it
// holds the replay's row locked, so the maintenance job cannot start it
// meanwhile.
func (a *Admin) CancelScheduledReplayTx(ctx context.Context, tx pgx.Tx, id int64) error {
	return a.cancelScheduledReplay(ctx, tx, id)
}

func (a *Admin) cancelScheduledReplay(ctx context.Context, db dbtx, id int64) error {
	var (
		state     ReplayState
		cancelled bool
	)
	err := db.QueryRow(ctx, a.q["cancelReplay"], id).Scan(&state, &cancelled)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("scheduled replay %d: %w", id, ErrNotFound)
	case err != nil:
		return a.dbError(ctx, "cancel scheduled replay", err)
	case !cancelled:
		return fmt.Errorf("scheduled replay %d is %s: only a replay that has not started can be cancelled", id, state)
	}
	return nil
}

// RunDueReplays runs the scheduled replays whose time has come, and returns
// how many messages it replayed. The maintenance job calls it; several
// processes may at once.
//
// A replay runs in batches of batchSize messages (0 for Config.BatchSize).
// Each batch is one transaction that replays the messages and records the
// replay's progress, so a replay interrupted by a crash resumes where it
// stopped and replays no message twice. If ctx ends, it returns what it
// replayed so far with ctx's error; the rest waits for the next call.
func (a *Admin) RunDueReplays(ctx context.Context, batchSize int) (int64, error) {
	if batchSize <= 0 {
		batchSize = a.cfg.BatchSize
	}
	var total int64
	for {
		n, found, err := a.runReplayBatch(ctx, batchSize)
		total += n
		if err != nil || !found {
			return total, err
		}
	}
}

// runReplayBatch runs one batch of the first due replay. found is false
// when no replay is due (or every due one is being run elsewhere).
func (a *Admin) runReplayBatch(ctx context.Context, size int) (replayed int64, found bool, err error) {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return 0, false, a.dbError(ctx, "run scheduled replays", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	var (
		id     int64
		raw    []byte
		note   string
		cursor int64
	)
	err = tx.QueryRow(ctx, a.q["claimDueReplay"]).Scan(&id, &raw, &note, &cursor)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, a.dbError(ctx, "run scheduled replays", err)
	}
	var f Filter
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, true, a.failReplay(ctx, tx, id, fmt.Errorf("its filter is not valid JSON: %w", err))
	}
	f.ReplayableOnly = true
	if note == "" {
		note = "scheduled replay " + strconv.FormatInt(id, 10)
	} else {
		note = "scheduled replay " + strconv.FormatInt(id, 10) + ": " + note
	}

	seqs, err := seqBatch(ctx, tx, a.q["replay"], f, cursor, size, note)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code[:2] == "22" { // data exception: the filter can never run
		return 0, true, a.failReplay(ctx, tx, id, a.dbError(ctx, "replay", err))
	}
	if err != nil {
		return 0, true, a.dbError(ctx, "run scheduled replay "+strconv.FormatInt(id, 10), err)
	}
	last := cursor
	for _, s := range seqs {
		last = max(last, s)
	}
	finished := len(seqs) < size
	if _, err := tx.Exec(ctx, a.q["advanceReplay"], id, len(seqs), last, finished); err != nil {
		return 0, true, a.dbError(ctx, "run scheduled replay "+strconv.FormatInt(id, 10), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, true, a.dbError(ctx, "run scheduled replay "+strconv.FormatInt(id, 10), err)
	}
	return int64(len(seqs)), true, nil
}

// failReplay ends replay id as failed with cause, in a fresh transaction:
// tx may be aborted.
func (a *Admin) failReplay(ctx context.Context, tx pgx.Tx, id int64, cause error) error {
	_ = tx.Rollback(ctx)
	if _, err := a.pool.Exec(ctx, a.q["failReplay"], id, cause.Error()); err != nil {
		return a.dbError(ctx, "record a failed scheduled replay", err)
	}
	return nil
}
