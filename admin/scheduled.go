package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	// ReplayCancelled is a replay an operator cancelled before it ended.
	ReplayCancelled ReplayState = "cancelled"
)

// ScheduledReplay is a replay an operator scheduled for later (inboxctl
// replay --at). The maintenance job (package maintenance) runs it once its
// time has come, by the database clock.
type ScheduledReplay struct {
	// AuditID is the audit record of its scheduling, which counts what it
	// replayed; 0 for one scheduled before pgbox kept an audit log.
	AuditID int64 `json:"audit_id,omitzero"`
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
	// Rate is the most messages it replays per second; 0 for no limit.
	Rate float64 `json:"rate,omitzero"`
	// Replayed counts the messages replayed so far.
	Replayed int64 `json:"replayed"`
	// RunAt is when it is due, by the database clock.
	RunAt time.Time `json:"run_at"`
	// Selected counts the messages its filter selected that were
	// replayable when it was scheduled: with Replayed, its progress.
	Selected int64 `json:"selected"`
	// StartedAt is when its first batch ran; nil until then.
	StartedAt *time.Time `json:"started_at"`
	// State is where the replay is in its life.
	State ReplayState `json:"state"`
}

// scan reads row, in scheduledReplayColumns' order, into r.
func (r *ScheduledReplay) scan(row pgx.Row) error {
	var (
		filter    []byte
		lastError *string
		rate      *float64
		selected  *int64
		auditID   *int64
	)
	if err := row.Scan(&r.ID, &r.RunAt, &filter, &r.Note, &r.State, &r.Replayed,
		&r.CreatedAt, &r.StartedAt, &r.FinishedAt, &lastError, &rate, &selected, &auditID); err != nil {
		return err
	}
	r.Error, r.Rate, r.Selected, r.AuditID = deref(lastError), deref(rate), deref(selected), deref(auditID)
	return json.Unmarshal(filter, &r.Filter)
}

// deref returns *p, or the zero value for nil (SQL NULL).
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// ScheduleReplayOptions says what a scheduled replay replays, when, and
// how fast.
type ScheduleReplayOptions struct {
	// Actor is who schedules it, as the audit log records it. Defaults to
	// ProcessActor, field by field.
	Actor Actor

	// At is when the replay is to run, judged by the database clock; a
	// time already past runs at the maintenance job's next check. Defaults
	// to the zero time: now, by the database clock (a throttled replay,
	// say).
	At time.Time

	// Filter selects the messages. Of those, the ones replayable when the
	// replay runs are replayed (Filter.ReplayableOnly is set for it).
	// Messages received after the replay is scheduled are left out:
	// Filter.Until is set to that time (by the database clock) when it is
	// unset or later, so that failures that keep arriving, as they do
	// while a downstream service is still down, neither keep a throttled
	// replay from ending nor have their attempts reset by it, over and
	// over, so that they never go dead. Defaults to the zero Filter: every
	// message received before the scheduling that is replayable then.
	Filter Filter

	// Note is kept in each replayed message's history, after the scheduled
	// replay's id. Defaults to none.
	Note string

	// Over spreads the replay evenly over this long: its rate is the
	// messages replayable now divided by Over. Set Over or Rate, not both.
	// Defaults to 0: no spreading.
	Over time.Duration

	// Rate is the most messages replayed per second (0.5: one every two
	// seconds), so that a recovered downstream service is not hit by the
	// whole backlog at once. The maintenance job spends it tick by tick:
	// each of its runs replays what the rate allowed since the one
	// before, and a runner that was stopped resumes at the rate, without
	// catching up. Defaults to 0: as fast as batches go.
	Rate float64
}

// validate reports options ScheduleReplay refuses.
func (o ScheduleReplayOptions) validate() error {
	switch {
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("schedule replay: the rate is %v: use a positive number of messages per second, or 0 for no limit", o.Rate)
	case o.Over < 0:
		return fmt.Errorf("schedule replay: Over is %s: use a positive duration, or 0 for no spreading", o.Over)
	case o.Rate > 0 && o.Over > 0:
		return errors.New("schedule replay: set a rate or a duration to spread the replay over, not both")
	}
	return o.Filter.Validate()
}

// ScheduleReplay records a replay of the messages opts.Filter selects, to
// run at opts.At (or now), at most opts.Rate messages per second: the
// maintenance job then replays those still replayable, as Replay would,
// with opts.Note in their history. Nothing is changed until then, and
// CancelScheduledReplay can call it off before it starts. The scheduling
// and the audit record that then counts the replayed messages are written
// in one transaction.
func (a *Admin) ScheduleReplay(ctx context.Context, opts ScheduleReplayOptions) (*ScheduledReplay, error) {
	return a.scheduleReplay(ctx, nil, opts)
}

// ScheduleReplayTx is ScheduleReplay inside the caller's transaction: the
// replay is scheduled only if tx commits.
func (a *Admin) ScheduleReplayTx(ctx context.Context, tx pgx.Tx, opts ScheduleReplayOptions) (*ScheduledReplay, error) {
	return a.scheduleReplay(ctx, tx, opts)
}

// scheduleSelection is a scheduled replay's selection in the audit log.
type scheduleSelection struct {
	At     *time.Time `json:"at,omitzero"`
	Filter Filter     `json:"filter"`
	Rate   float64    `json:"rate,omitzero"`
}

func (a *Admin) scheduleReplay(ctx context.Context, tx pgx.Tx, opts ScheduleReplayOptions) (*ScheduledReplay, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	f := opts.Filter.ReplaySelection() // stored so: a later rule does not change what was scheduled
	var at any
	if !opts.At.IsZero() {
		at = opts.At
	}
	var r ScheduledReplay
	err := a.inTx(ctx, tx, func(db dbtx) error {
		// Bounded by the time of its scheduling (see
		// ScheduleReplayOptions.Filter): the clock's, not the
		// transaction's start, so that a message received earlier in the
		// caller's transaction (ScheduleReplayTx) is in it.
		var now time.Time
		if err := db.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
			return a.dbError(ctx, "schedule replay", err)
		}
		if f.Until.IsZero() || f.Until.After(now) {
			f.Until = now.UTC()
		}
		filter, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("schedule replay: %w", err)
		}
		var selected int64
		if err := db.QueryRow(ctx, a.q["count"], f.args()...).Scan(&selected); err != nil {
			return a.dbError(ctx, "schedule replay", err)
		}
		rate := opts.Rate
		if opts.Over > 0 {
			rate = float64(max(selected, 1)) / opts.Over.Seconds()
		}
		sel := scheduleSelection{Filter: f, Rate: rate}
		if !opts.At.IsZero() {
			sel.At = &opts.At
		}
		auditID, err := a.auditStart(ctx, db, auditEntry{action: AuditScheduleReplay, actor: opts.Actor, note: opts.Note, selection: sel})
		if err != nil {
			return err
		}
		var rateArg any
		if rate > 0 {
			rateArg = rate
		}
		// The filter goes as text: pgx would send a []byte as bytea unless
		// it knew the parameter is jsonb, which the exec and
		// simple_protocol query modes never tell it.
		err = r.scan(db.QueryRow(ctx, a.q["scheduleReplay"], at, string(filter), opts.Note, rateArg, selected, auditID))
		if err != nil {
			return a.dbError(ctx, "schedule replay", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
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

// CancelScheduledReplayOptions says which scheduled replay
// CancelScheduledReplay calls off, and who does.
type CancelScheduledReplayOptions struct {
	// Actor is who cancels, as the audit log records it. Defaults to
	// ProcessActor, field by field.
	Actor Actor

	// ID is the scheduled replay's. Required.
	ID int64

	// Note says why, in the audit log. Defaults to none.
	Note string
}

// CancelScheduledReplay calls off scheduled replay opts.ID while it waits
// or runs (a throttled replay, say: the messages it has replayed stay
// replayed, the rest are left as they are), and records that in the audit
// log (the record of its scheduling ends as cancelled, with its count). A
// batch under way finishes first: the cancel waits for it. It returns an
// error wrapping ErrNotFound when there is no such replay, and an error
// when it has already ended; then nothing is changed or recorded.
func (a *Admin) CancelScheduledReplay(ctx context.Context, opts CancelScheduledReplayOptions) error {
	return a.cancelScheduledReplay(ctx, nil, opts)
}

// CancelScheduledReplayTx is CancelScheduledReplay inside the caller's
// transaction: the replay is called off only if tx commits. Until then it
// holds the replay's row locked, so the maintenance job cannot run it
// meanwhile.
func (a *Admin) CancelScheduledReplayTx(ctx context.Context, tx pgx.Tx, opts CancelScheduledReplayOptions) error {
	return a.cancelScheduledReplay(ctx, tx, opts)
}

// errNotCancelled rolls back a cancel that found the replay already
// ended; cancelScheduledReplay replaces it with the explanation.
var errNotCancelled = errors.New("not cancelled")

func (a *Admin) cancelScheduledReplay(ctx context.Context, tx pgx.Tx, opts CancelScheduledReplayOptions) error {
	var state ReplayState
	err := a.inTx(ctx, tx, func(db dbtx) error {
		auditID, err := a.auditStart(ctx, db, auditEntry{action: AuditCancelScheduledReplay, actor: opts.Actor, note: opts.Note,
			selection: map[string]int64{"scheduled_replay": opts.ID}})
		if err != nil {
			return err
		}
		var cancelled bool
		err = db.QueryRow(ctx, a.q["cancelReplay"], opts.ID, auditID).Scan(&state, &cancelled)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("scheduled replay %d: %w", opts.ID, ErrNotFound)
		case err != nil:
			return a.dbError(ctx, "cancel scheduled replay", err)
		case !cancelled:
			return errNotCancelled
		}
		return a.auditEnd(ctx, db, auditID, nil)
	})
	if errors.Is(err, errNotCancelled) {
		return fmt.Errorf("scheduled replay %d is %s: only a replay waiting or under way can be cancelled", opts.ID, state)
	}
	return err
}

// RunDueReplaysOptions says how RunDueReplays runs the due replays.
type RunDueReplaysOptions struct {
	// BatchSize is the most messages one batch replays. Defaults to
	// Config.BatchSize.
	BatchSize int

	// Tick is how often the caller calls RunDueReplays (the maintenance
	// job: its ReplayInterval). A throttled replay (ScheduledReplay.Rate)
	// replays what its rate allowed since it last ran, but never more than
	// one Tick's worth (or one message), however long ago that was: a
	// runner stopped for an hour does not catch the hour up at once.
	// Defaults to TickDefault.
	Tick time.Duration
}

// TickDefault is the default RunDueReplaysOptions.Tick.
const TickDefault = time.Second

// RunDueReplays runs the scheduled replays whose time has come, a
// throttled one as far as its rate allows, and returns how many messages
// it replayed. The maintenance job calls it; several processes may at
// once.
//
// A replay runs in batches of opts.BatchSize messages. Each batch is one
// transaction that replays the messages and records the replay's progress
// (its cursor, its count, its pace, and the count in the audit record of
// its scheduling), so a replay interrupted by a crash resumes where it
// stopped, replays no message twice, and keeps its rate. If ctx ends, it
// returns what it replayed so far with ctx's error; the rest waits for the
// next call.
func (a *Admin) RunDueReplays(ctx context.Context, opts RunDueReplaysOptions) (int64, error) {
	size, err := a.batchSize("RunDueReplaysOptions.BatchSize", opts.BatchSize)
	if err != nil {
		return 0, err
	}
	if opts.Tick < 0 {
		return 0, fmt.Errorf("admin: RunDueReplaysOptions.Tick is %s: use a positive duration, or 0 for the default (%s)", opts.Tick, TickDefault)
	}
	tick := cmp.Or(opts.Tick, TickDefault).Milliseconds()
	var total int64
	for {
		n, found, err := a.runReplayBatch(ctx, size, tick)
		total += n
		if err != nil || !found {
			return total, err
		}
	}
}

// runReplayBatch runs one batch of the first due replay that may replay
// now. found is false when none may (or every one is being run elsewhere).
func (a *Admin) runReplayBatch(ctx context.Context, size int, tick int64) (replayed int64, found bool, err error) {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return 0, false, a.dbError(ctx, "run scheduled replays", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	var (
		id      int64
		raw     []byte
		note    string
		cursor  int64
		auditID *int64
		allowed *int64
	)
	err = tx.QueryRow(ctx, a.q["claimDueReplay"], tick).Scan(&id, &raw, &note, &cursor, &auditID, &allowed)
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
	if allowed != nil {
		size = int(min(int64(size), *allowed))
	}

	seqs, err := seqBatch(ctx, tx, a.q["replay"], f, cursor, size, note, deref(auditID))
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
	if _, err := tx.Exec(ctx, a.q["advanceReplay"], tick, id, len(seqs), last, finished); err != nil {
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
