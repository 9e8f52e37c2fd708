package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// progressOf reads scheduled replay id's state and count, whether the
// count is within what its rate allowed since it was due (by the database
// clock: replayed ≤ rate × elapsed), and its audit record's count.
func (b *testBundle) progressOf(t *testing.T, id int64) (state admin.ReplayState, replayed int64, withinRate bool, audited int64) {
	t.Helper()
	err := b.pool.QueryRow(context.Background(), ident.Render(`
		SELECT r.state, r.replayed, r.replayed <= r.rate * extract(epoch FROM now() - r.run_at) + 1, l.affected
		FROM /* schema */scheduled_replays AS r JOIN /* schema */audit_log AS l ON l.id = r.audit_id
		WHERE r.id = $1`, b.schema), id).Scan(&state, &replayed, &withinRate, &audited)
	require.NoError(t, err)
	return state, replayed, withinRate, audited
}

// runUntilDone calls RunDueReplays, as the maintenance job would at each
// tick, until scheduled replay id is done, checking after each call that
// it kept within its rate and that its audit record counts what it
// replayed.
func (b *testBundle) runUntilDone(t *testing.T, id int64, opts admin.RunDueReplaysOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		_, err := b.adm.RunDueReplays(ctx, opts)
		require.NoError(t, err)
		state, replayed, withinRate, audited := b.progressOf(t, id)
		require.True(t, withinRate, "replayed %d: more than the rate allows", replayed)
		require.Equal(t, replayed, audited, "the audit record counts what was replayed")
		if state == admin.ReplayDone {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replay %d not done: %d replayed", id, replayed)
		case <-time.After(20 * time.Millisecond): // the next tick
		}
	}
}

// A throttled replay advances in steps its rate allows, never ahead of
// it, and replays every message once.
func TestThrottledReplayKeepsItsRate(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "dead", 150, pgbox.InboxDead, "gateway timeout", 0)
	r, err := b.adm.ScheduleReplay(context.Background(), admin.ScheduleReplayOptions{Rate: 100, Note: "gateway back"})
	require.NoError(t, err)
	require.EqualValues(t, 100, r.Rate)
	require.EqualValues(t, 150, r.Selected)

	b.runUntilDone(t, r.ID, admin.RunDueReplaysOptions{Tick: time.Second})
	// At most one tick's worth (100) may go at once, the other 50 as the
	// rate accrues: half a second at least, by the database's clock, from
	// the first batch to the last. (How many steps that takes depends on
	// how fast the machine runs them, and is not the promise.)
	var took float64
	require.NoError(t, b.pool.QueryRow(context.Background(), ident.Render(
		"SELECT extract(epoch FROM finished_at - started_at)::float8 FROM /* schema */scheduled_replays WHERE id = $1", b.schema), r.ID).Scan(&took))
	require.GreaterOrEqual(t, took, 0.5, "150 messages at 100/s, 100 at most at once, take half a second at least")
	require.Equal(t, 150, b.count(t, b.pool, "status = 'pending' AND replays = 1"), "each message replayed once")
	state, replayed, _, audited := b.progressOf(t, r.ID)
	require.Equal(t, admin.ReplayDone, state)
	require.EqualValues(t, 150, replayed)
	require.EqualValues(t, 150, audited)
	records, err := b.adm.AuditLog(context.Background(), admin.AuditLogOptions{})
	require.NoError(t, err)
	require.Equal(t, admin.AuditFinished, records[0].State)
}

// A throttled replay whose runner was away for an hour resumes at its
// rate: it does not replay the hour's worth at once.
func TestThrottledReplayDoesNotCatchUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "dead", 500, pgbox.InboxDead, "gateway timeout", 0)
	r, err := b.adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{At: time.Now().Add(-time.Hour), Rate: 10})
	require.NoError(t, err)
	n, err := b.adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{Tick: time.Second})
	require.NoError(t, err)
	require.Positive(t, n)
	require.Less(t, n, int64(100), "one tick's worth (10), not the hour's (36,000)")
	state, _, _, _ := b.progressOf(t, r.ID)
	require.Equal(t, admin.ReplayRunning, state)
}

// A throttled replay whose batch transaction is cut off (here: cancelled
// while it waits for a row another transaction holds, as a crash would
// end it) loses that batch only; the next run resumes after the last
// committed one, and no message is replayed twice.
func TestThrottledReplayResumesAfterACutBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "dead", 30, pgbox.InboxDead, "gateway timeout", 0)
	r, err := b.adm.ScheduleReplay(context.Background(), admin.ScheduleReplayOptions{Rate: 1000})
	require.NoError(t, err)

	// Hold message dead-25, so a batch reaching it waits.
	holder, err := b.pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.Background()) }()
	_, err = holder.Exec(context.Background(), ident.Render(
		"SELECT 1 FROM /* schema */inbox WHERE message_id = 'dead-25' FOR UPDATE", b.schema))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done, ended := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(ended)
		for ctx.Err() == nil { // tick until the batch that waits is cut off
			if _, err := b.adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{BatchSize: 10, Tick: time.Second}); err != nil {
				t.Logf("RunDueReplays: %v", err)
				done <- err
				return
			}
		}
		done <- ctx.Err()
	}()
	pgtest.WaitBlockedBy(t, holder, ended)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, holder.Rollback(context.Background()))

	state, replayed, _, audited := b.progressOf(t, r.ID)
	require.Equal(t, admin.ReplayRunning, state)
	require.Less(t, replayed, int64(30))
	require.EqualValues(t, replayed, b.count(t, b.pool, "replays = 1"), "the progress is exactly what committed")
	require.Equal(t, replayed, audited)

	b.runUntilDone(t, r.ID, admin.RunDueReplaysOptions{BatchSize: 10, Tick: time.Second})
	require.Equal(t, 30, b.count(t, b.pool, "status = 'pending' AND replays = 1"), "each message replayed exactly once")
	require.Zero(t, b.count(t, b.pool, "replays > 1"))
}

// Over spreads the replay evenly: its rate is what is replayable now over
// the duration. Bad pacing options are refused, and nothing is scheduled.
func TestScheduleReplayPacing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "dead", 20, pgbox.InboxDead, "gateway timeout", 0)
	r, err := b.adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{Over: 10 * time.Second})
	require.NoError(t, err)
	require.InDelta(t, 2.0, r.Rate, 1e-9)
	require.EqualValues(t, 20, r.Selected)

	for opts, words := range map[*admin.ScheduleReplayOptions]string{
		{Rate: -1}:                   "the rate is -1",
		{Rate: 1, Over: time.Minute}: "not both",
		{Over: -time.Minute}:         "Over is -1m0s",
		{Filter: admin.Filter{Statuses: []pgbox.InboxStatus{"deda"}}}: "deda",
	} {
		_, err := b.adm.ScheduleReplay(ctx, *opts)
		require.ErrorContains(t, err, words)
	}
	n, err := b.adm.CountScheduledReplays(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// A throttled replay under way can be called off: what it replayed stays
// replayed and counted, nothing more is.
func TestCancelThrottledReplayPartWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "dead", 50, pgbox.InboxDead, "gateway timeout", 0)
	r, err := b.adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{At: time.Now().Add(-time.Hour), Rate: 10})
	require.NoError(t, err)
	n, err := b.adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{Tick: time.Second})
	require.NoError(t, err)
	require.Positive(t, n)

	require.NoError(t, b.adm.CancelScheduledReplay(ctx, admin.CancelScheduledReplayOptions{ID: r.ID, Note: "gateway failing again"}))
	more, err := b.adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{Tick: time.Second})
	require.NoError(t, err)
	require.Zero(t, more)
	require.EqualValues(t, n, b.count(t, b.pool, "replays = 1"))

	records, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{Action: admin.AuditScheduleReplay})
	require.NoError(t, err)
	require.Len(t, records, 1)
	require.Equal(t, admin.AuditCancelled, records[0].State)
	require.Equal(t, n, records[0].Affected)
	require.ErrorContains(t, b.adm.CancelScheduledReplay(ctx, admin.CancelScheduledReplayOptions{ID: r.ID}),
		"is cancelled: only a replay waiting or under way can be cancelled")
}

// A scheduled replay leaves out the messages received after it was
// scheduled: failures that keep arriving while a downstream service is
// still down neither keep a throttled replay from ending nor have their
// attempts reset by it. A message received before, that fails after, is
// replayable when the replay runs, and replayed.
func TestScheduledReplayLeavesOutLaterArrivals(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "before", 5, pgbox.InboxDead, "gateway timeout", time.Minute)
	b.add(t, "payments", "failing-later", 1, pgbox.InboxPending, "", time.Minute)
	r, err := b.adm.ScheduleReplay(context.Background(), admin.ScheduleReplayOptions{Rate: 1000, Filter: admin.Filter{Consumer: "payments"}})
	require.NoError(t, err)
	require.EqualValues(t, 5, r.Selected)
	require.False(t, r.Filter.Until.IsZero(), "the filter keeps the time of the scheduling")
	require.WithinDuration(t, r.CreatedAt, r.Filter.Until, time.Minute)

	b.add(t, "payments", "after", 4, pgbox.InboxDead, "gateway timeout", -time.Second) // received after the scheduling
	b.exec(t, `UPDATE /* schema */inbox SET status = 'dead', attempts = 3, last_error = 'gateway timeout' WHERE message_id = 'failing-later-1'`)
	b.runUntilDone(t, r.ID, admin.RunDueReplaysOptions{BatchSize: 2, Tick: time.Second})

	require.Equal(t, 6, b.count(t, b.pool, "replays = 1 AND status = 'pending'"), "the five, and the one received before that failed later")
	require.Equal(t, 4, b.count(t, b.pool, "message_id LIKE 'after-%' AND status = 'dead' AND attempts = 3 AND replays = 0"),
		"those received after it are left as they were")
}
