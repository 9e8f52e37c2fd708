package admin_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// deadMessages stores n dead messages of consumer "payments", and one done.
func deadMessages(t *testing.T, schema string, n int) {
	t.Helper()
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		SELECT 'payments', 'order-' || g, 'ChargeCard', 'dead', 3, 3, '\x00'::bytea, ''::bytea, 'gateway timeout', /* schema */inbox_bucket('order-' || g)
		FROM generate_series(1, $1) AS g
		UNION ALL
		SELECT 'payments', 'done-1', 'ChargeCard', 'done', 1, 3, '\x00'::bytea, ''::bytea, NULL, /* schema */inbox_bucket('done-1')`, schema), n)
	require.NoError(t, err)
}

func countStatus(t *testing.T, schema, status string) (n int) {
	t.Helper()
	err := pgtest.Pool(t).QueryRow(context.Background(), ident.Render(
		"SELECT count(*) FROM /* schema */inbox WHERE status = $1", schema), status).Scan(&n)
	require.NoError(t, err)
	return n
}

// A scheduled replay changes nothing until its time, by the database clock,
// then replays what its filter selects, once, however many runners call.
func TestScheduledReplayRunsOnceWhenDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	deadMessages(t, schema, 25)
	adm, err := admin.New(pgtest.Pool(t), admin.Config{Schema: schema})
	require.NoError(t, err)

	later, err := adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{At: time.Now().Add(time.Hour), Filter: admin.Filter{Consumer: "payments"}, Note: "gateway fixed"})
	require.NoError(t, err)
	require.Equal(t, admin.ReplayScheduled, later.State)
	require.True(t, later.Filter.ReplayableOnly, "a scheduled replay only ever touches replayable messages")
	due, err := adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{
		At:     time.Now().Add(-time.Second),
		Filter: admin.Filter{Consumer: "payments", Statuses: []pgbox.InboxStatus{pgbox.InboxDead}},
	})
	require.NoError(t, err)

	n, err := adm.CountScheduledReplays(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)

	// Four runners at once, in batches of 10: each message is replayed once.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
	)
	for range 4 {
		wg.Go(func() {
			n, err := adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{BatchSize: 10})
			require.NoError(t, err)
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	require.EqualValues(t, 25, total)
	require.Equal(t, 25, countStatus(t, schema, "pending"))
	require.Equal(t, 1, countStatus(t, schema, "done"), "a done message is never replayed")

	var replays, entries int
	err = pgtest.Pool(t).QueryRow(ctx, ident.Render(`
		SELECT sum(replays), count(*) FILTER (WHERE errors->-1->>'note' = 'scheduled replay ' || $1::bigint)
		FROM /* schema */inbox WHERE status = 'pending'`, schema), due.ID).Scan(&replays, &entries)
	require.NoError(t, err)
	require.Equal(t, 25, replays, "each message replayed exactly once")
	require.Equal(t, 25, entries, "the history names the scheduled replay")

	list, err := adm.ScheduledReplays(ctx, 0)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, later.ID, list[0].ID, "waiting replays first")
	require.Equal(t, admin.ReplayScheduled, list[0].State)
	require.Equal(t, due.ID, list[1].ID)
	require.Equal(t, admin.ReplayDone, list[1].State)
	require.EqualValues(t, 25, list[1].Replayed)
	require.NotNil(t, list[1].FinishedAt)

	// Nothing else is due: another run replays nothing.
	again, err := adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{BatchSize: 10})
	require.NoError(t, err)
	require.Zero(t, again)
}

// Through a pool whose query mode sends parameters without their types (as
// a user behind PgBouncer may configure), a replay is scheduled with its
// filter, listed, and run.
func TestScheduledReplayInUntypedQueryModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.UntypedModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupOn(t, pgtest.NewPoolMode(t, mode, 2), admin.Config{})
			b.add(t, "payments", "dead", 5, pgbox.InboxDead, "gateway timeout", time.Minute)
			r, err := b.adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{
				At: time.Now().Add(-time.Second),
				Filter: admin.Filter{
					Consumer: "payments", Statuses: []pgbox.InboxStatus{pgbox.InboxDead},
					IDs: []string{"dead-1", "dead-2", "dead-3"}, Since: time.Now().Add(-time.Hour),
				},
				Note: "gateway fixed",
			})
			require.NoError(t, err)
			require.Equal(t, []string{"dead-1", "dead-2", "dead-3"}, r.Filter.IDs)

			n, err := b.adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{BatchSize: 2})
			require.NoError(t, err)
			require.EqualValues(t, 3, n)
			require.Equal(t, 3, countStatus(t, b.schema, "pending"))
			list, err := b.adm.ScheduledReplays(ctx, 0)
			require.NoError(t, err)
			require.Len(t, list, 1)
			require.Equal(t, admin.ReplayDone, list[0].State)
			require.EqualValues(t, 3, list[0].Replayed)
			require.Equal(t, []pgbox.InboxStatus{pgbox.InboxDead}, list[0].Filter.Statuses)
		})
	}
}

func TestCancelScheduledReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	deadMessages(t, schema, 3)
	adm, err := admin.New(pgtest.Pool(t), admin.Config{Schema: schema})
	require.NoError(t, err)

	r, err := adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{At: time.Now().Add(-time.Minute), Filter: admin.Filter{Consumer: "payments"}})
	require.NoError(t, err)
	require.NoError(t, adm.CancelScheduledReplay(ctx, admin.CancelScheduledReplayOptions{ID: r.ID}))
	n, err := adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{})
	require.NoError(t, err)
	require.Zero(t, n, "a cancelled replay never runs")
	require.Equal(t, 3, countStatus(t, schema, "dead"))

	require.ErrorContains(t, adm.CancelScheduledReplay(ctx, admin.CancelScheduledReplayOptions{ID: r.ID}), "is cancelled: only a replay waiting or under way can be cancelled")
	require.ErrorIs(t, adm.CancelScheduledReplay(ctx, admin.CancelScheduledReplayOptions{ID: r.ID + 100}), admin.ErrNotFound)
}

// A filter that can never run (an invalid regular expression stored behind
// the API's back) fails its replay, with the reason, instead of failing the
// maintenance job for ever.
func TestScheduledReplayWithABadFilterFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	deadMessages(t, schema, 2)
	adm, err := admin.New(pgtest.Pool(t), admin.Config{Schema: schema})
	require.NoError(t, err)

	// Through the API, it is refused at once, and nothing is scheduled.
	_, err = adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{At: time.Now().Add(-time.Minute), Filter: admin.Filter{ErrorMatches: "("}})
	require.ErrorContains(t, err, "not a valid regular expression")
	require.ErrorIs(t, err, admin.ErrInvalidPattern)
	n, err := adm.CountScheduledReplays(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	bad, err := adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{At: time.Now().Add(-time.Minute), Filter: admin.Filter{Consumer: "nobody"}})
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(ctx, ident.Render(`UPDATE /* schema */scheduled_replays SET filter = '{"error_matches": "(", "replayable_only": true}' WHERE id = $1`, schema), bad.ID)
	require.NoError(t, err)
	good, err := adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{At: time.Now().Add(-time.Minute), Filter: admin.Filter{Consumer: "payments"}})
	require.NoError(t, err)

	n, err = adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the bad one does not hold up the good one")

	list, err := adm.ScheduledReplays(ctx, 0)
	require.NoError(t, err)
	states := map[int64]admin.ScheduledReplay{}
	for _, r := range list {
		states[r.ID] = r
	}
	require.Equal(t, admin.ReplayFailed, states[bad.ID].State)
	require.Contains(t, states[bad.ID].Error, "not a valid regular expression")
	require.Equal(t, admin.ReplayDone, states[good.ID].State)
}

// ScheduleReplayTx and CancelScheduledReplayTx take effect only when the
// caller's transaction commits.
func TestScheduledReplayTx(t *testing.T) {
	t.Parallel()
	inCallerTx(t, func(t *testing.T, b *testBundle, tx pgx.Tx) (func(), func()) {
		ctx := context.Background()
		b.add(t, "payments", "dead", 3, pgbox.InboxDead, "gateway timeout", 0)
		keep, err := b.adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{At: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		r, err := b.adm.ScheduleReplayTx(ctx, tx, admin.ScheduleReplayOptions{
			At:     time.Now().Add(-time.Second),
			Filter: admin.Filter{Consumer: "payments"},
			Note:   "in tx",
		})
		require.NoError(t, err)
		require.Equal(t, admin.ReplayScheduled, r.State)
		require.NoError(t, b.adm.CancelScheduledReplayTx(ctx, tx, admin.CancelScheduledReplayOptions{ID: keep.ID}))

		// Until the commit, nobody else sees either: the due replay does
		// not run, and the other is still scheduled.
		n, err := b.adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{})
		require.NoError(t, err)
		require.Zero(t, n)
		list, err := b.adm.ScheduledReplays(ctx, 0)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, admin.ReplayScheduled, list[0].State)

		return func() {
				count, err := b.adm.CountScheduledReplays(ctx)
				require.NoError(t, err)
				require.EqualValues(t, 1, count, "the cancelled one is still waiting; the new one never was")
			}, func() {
				n, err := b.adm.RunDueReplays(ctx, admin.RunDueReplaysOptions{})
				require.NoError(t, err)
				require.EqualValues(t, 3, n)
				list, err := b.adm.ScheduledReplays(ctx, 0)
				require.NoError(t, err)
				states := map[int64]admin.ReplayState{}
				for _, r := range list {
					states[r.ID] = r.State
				}
				require.Equal(t, map[int64]admin.ReplayState{keep.ID: admin.ReplayCancelled, r.ID: admin.ReplayDone}, states)
				require.Equal(t, 3, countStatus(t, b.schema, "pending"))
			}
	})
}
