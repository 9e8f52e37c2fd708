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
	CreatedAt time.Time `json:"created_at"`
	// Error is why it failed.
	Error string `json:"error,omitzero"`
	// Filter selects the messages; of those, the ones replayable when it
	// runs are replayed.
	Filter     Filter     `json:"filter"`
	FinishedAt *time.Time `json:"finished_at"`
	ID         int64      `json:"id"`
	// Note is kept in each replayed message's history.
	Note string `json:"note,omitzero"`
	// Replayed counts the messages replayed so far.
	Replayed  int64      `json:"replayed"`
	RunAt     time.Time  `json:"run_at"`
	StartedAt *time.Time `json:"started_at"`
	// State is where the replay is in its life.
	State ReplayState `json:"state"`
}

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

// ScheduleReplay records a replay of the messages matching f, to run at
// at: the maintenance job then replays those still replayable, as Replay
// would, with note in their history. The time is judged by the database
// clock; a time already past runs at the maintenance job's next check.
// Nothing is changed until then, and CancelScheduledReplay can call it off.
func (a *Admin) ScheduleReplay(ctx context.Context, f Filter, note string, at time.Time) (*ScheduledReplay, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if at.IsZero() {
		return nil, errors.New("schedule replay: the time is zero")
	}
	f.ReplayableOnly = true
	filter, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("schedule replay: %w", err)
	}
	var r ScheduledReplay
	if err := r.scan(a.pool.QueryRow(ctx, a.q["scheduleReplay"], at, filter, note)); err != nil {
		return nil, a.dbError(ctx, "schedule replay", err)
	}
	return &r, nil
}

// ScheduledReplays lists scheduled replays: those waiting or under way
// first, soonest first, then finished ones, newest first; at most limit (0
// for 100).
func (a *Admin) ScheduledReplays(ctx context.Context, limit int) ([]ScheduledReplay, error) {
	if limit <= 0 {
		limit = 100
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
	var (
		state     ReplayState
		cancelled bool
	)
	err := a.pool.QueryRow(ctx, a.q["cancelReplay"], id).Scan(&state, &cancelled)
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

	rows, err := tx.Query(ctx, a.q["replay"], append(f.args(), cursor, size, note)...)
	var seqs []int64
	if err == nil {
		seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
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
