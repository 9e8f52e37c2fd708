package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Every write is recorded: who (the options' Actor, or this process), the
// action, its selection and note, how many rows it changed, and that it
// finished; newest first, narrowed by action and time.
func TestAuditRecordsEveryWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.mixed(t)
	b.add(t, "payments", "old", 4, pgbox.InboxDone, "", 48*time.Hour)
	alice := admin.Actor{Name: "alice", Host: "laptop", PID: 42}

	n, err := b.adm.Replay(ctx, admin.ReplayOptions{Actor: alice, BatchSize: 10, Filter: admin.Filter{Consumer: "payments"}, Note: "gateway fixed"})
	require.NoError(t, err)
	require.EqualValues(t, 29, n)
	n, err = b.adm.Discard(ctx, admin.DiscardOptions{Filter: admin.Filter{Consumer: "shipping"}, Reason: "carrier gone"})
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	n, err = b.adm.Purge(ctx, admin.PurgeOptions{Actor: alice, Status: pgbox.InboxDone, OlderThan: 24 * time.Hour, BatchSize: 3})
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	n, err = b.adm.OutboxRetry(ctx, admin.OutboxRetryOptions{Actor: alice, IDs: []uuid.UUID{uuid.New()}})
	require.NoError(t, err)
	require.Zero(t, n)
	r, err := b.adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{Actor: alice, At: time.Now().Add(time.Hour), Rate: 5})
	require.NoError(t, err)
	require.NoError(t, b.adm.CancelScheduledReplay(ctx, admin.CancelScheduledReplayOptions{Actor: alice, ID: r.ID, Note: "not needed"}))

	records, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{})
	require.NoError(t, err)
	type row struct {
		Action   admin.AuditAction
		Name     string
		Affected int64
		State    admin.AuditState
		Note     string
	}
	var got []row
	for _, r := range records {
		got = append(got, row{r.Action, r.Actor.Name, r.Affected, r.State, r.Note})
	}
	me := admin.ProcessActor()
	require.Equal(t, []row{
		{admin.AuditCancelScheduledReplay, "alice", 1, admin.AuditFinished, "not needed"},
		{admin.AuditScheduleReplay, "alice", 0, admin.AuditCancelled, ""},
		{admin.AuditOutboxRetry, "alice", 0, admin.AuditFinished, ""},
		{admin.AuditPurge, "alice", 4, admin.AuditFinished, ""},
		{admin.AuditDiscard, me.Name, 4, admin.AuditFinished, "carrier gone"},
		{admin.AuditReplay, "alice", 29, admin.AuditFinished, "gateway fixed"},
	}, got, "newest first")
	replay := records[len(records)-1]
	require.Equal(t, alice, replay.Actor)
	require.JSONEq(t, `{"consumer":"payments"}`, string(replay.Selection))
	require.NotNil(t, replay.FinishedAt)
	discard := records[len(records)-2]
	require.Equal(t, me, discard.Actor, "the library default names this process")
	require.JSONEq(t, `{"older_than":"24h0m0s","status":"done"}`, string(records[3].Selection))

	purges, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{Action: admin.AuditPurge})
	require.NoError(t, err)
	require.Len(t, purges, 1)
	later, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{Since: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, later)
	_, err = b.adm.AuditLog(ctx, admin.AuditLogOptions{Action: "replayed"})
	require.ErrorContains(t, err, `unknown audit action "replayed": use one of replay, discard`)
}

// A replay stopped part way (here its context is cancelled after the first
// batch, as Ctrl-C does) is recorded as interrupted, with exactly the
// count its committed batches replayed.
func TestAuditInterruptedReplayKeepsItsCount(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "dead", 20, pgbox.InboxDead, "gateway timeout", 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	n, err := b.adm.Replay(ctx, admin.ReplayOptions{BatchSize: 5, ProgressFunc: func(int64) { cancel() }})
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 5, n)

	records, err := b.adm.AuditLog(context.Background(), admin.AuditLogOptions{})
	require.NoError(t, err)
	require.Len(t, records, 1)
	require.Equal(t, admin.AuditInterrupted, records[0].State)
	require.Contains(t, records[0].Error, "context canceled")
	require.EqualValues(t, 5, records[0].Affected)
	require.Equal(t, 5, b.count(t, b.pool, "replays = 1"), "the count is what was replayed")
}

// A purge or outbox retry stopped after a full batch with rows still left
// is interrupted, not finished: the question asked after an interruption
// finds them.
func TestAuditInterruptedPurgeAndOutboxRetryKeepTheirCount(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "done", 20, pgbox.InboxDone, "", 2*time.Hour)
	b.outboxRows(t, 20, pgbox.OutboxDead)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n, err := b.adm.Purge(ctx, admin.PurgeOptions{BatchSize: 5, Status: pgbox.InboxDone, OlderThan: time.Hour, ProgressFunc: func(int64) { cancel() }})
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 5, n)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	n, err = b.adm.OutboxRetry(ctx, admin.OutboxRetryOptions{BatchSize: 5, ProgressFunc: func(int64) { cancel() }})
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 5, n)

	records, err := b.adm.AuditLog(context.Background(), admin.AuditLogOptions{})
	require.NoError(t, err)
	require.Len(t, records, 2)
	for _, r := range records {
		require.Equal(t, []any{admin.AuditInterrupted, int64(5)}, []any{r.State, r.Affected}, r.Action)
	}
}

// In a caller's transaction the record goes with the change: gone if it
// rolls back, there (finished, counted) if it commits.
func TestAuditInCallerTx(t *testing.T) {
	t.Parallel()
	inCallerTx(t, func(t *testing.T, b *testBundle, tx pgx.Tx) (func(), func()) {
		ctx := context.Background()
		b.add(t, "payments", "dead", 7, pgbox.InboxDead, "boom", 0)
		n, err := b.adm.ReplayTx(ctx, tx, admin.ReplayOptions{BatchSize: 3})
		require.NoError(t, err)
		require.EqualValues(t, 7, n)
		records := func() []admin.AuditRecord {
			r, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{})
			require.NoError(t, err)
			return r
		}
		require.Empty(t, records(), "nobody sees the record before the commit")
		return func() {
				require.Empty(t, records())
			}, func() {
				got := records()
				require.Len(t, got, 1)
				require.EqualValues(t, 7, got[0].Affected)
				require.Equal(t, admin.AuditFinished, got[0].State)
			}
	})
}

// Through a pool whose query mode sends parameters without their types (as
// behind PgBouncer), every audited write and the audit log work.
func TestAuditInUntypedQueryModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.UntypedModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupOn(t, pgtest.NewPoolMode(t, mode, 2), admin.Config{})
			b.add(t, "payments", "dead", 6, pgbox.InboxDead, "gateway timeout", time.Minute)
			b.add(t, "payments", "done", 2, pgbox.InboxDone, "", 48*time.Hour)
			actor := admin.Actor{Name: "alice", Host: "laptop", PID: 7}

			require.NoError(t, b.adm.EditAndReplay(ctx, admin.EditOptions{Actor: actor, Consumer: "payments", ID: "dead-1", Payload: []byte{0, 1, 2}, Note: "fixed"}))
			n, err := b.adm.Replay(ctx, admin.ReplayOptions{Actor: actor, BatchSize: 2, Filter: admin.Filter{IDs: []string{"dead-2", "dead-3"}}})
			require.NoError(t, err)
			require.EqualValues(t, 2, n)
			n, err = b.adm.Discard(ctx, admin.DiscardOptions{Actor: actor, Filter: admin.Filter{IDs: []string{"dead-4"}}, Reason: "test"})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			n, err = b.adm.Purge(ctx, admin.PurgeOptions{Actor: actor, Status: pgbox.InboxDone, OlderThan: time.Hour})
			require.NoError(t, err)
			require.EqualValues(t, 2, n)
			n, err = b.adm.OutboxRetry(ctx, admin.OutboxRetryOptions{Actor: actor, IDs: []uuid.UUID{uuid.New()}})
			require.NoError(t, err)
			require.Zero(t, n)
			later, err := b.adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{Actor: actor, At: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			require.NoError(t, b.adm.CancelScheduledReplay(ctx, admin.CancelScheduledReplayOptions{Actor: actor, ID: later.ID}))
			r, err := b.adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{Actor: actor, Rate: 1000, Filter: admin.Filter{IDs: []string{"dead-5", "dead-6"}}})
			require.NoError(t, err)
			b.runUntilDone(t, r.ID, admin.RunDueReplaysOptions{})

			records, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{Since: time.Now().Add(-time.Hour), Action: admin.AuditScheduleReplay, Limit: 1})
			require.NoError(t, err)
			require.Len(t, records, 1)
			require.Equal(t, actor, records[0].Actor)
			require.EqualValues(t, 2, records[0].Affected)
			require.Equal(t, admin.AuditFinished, records[0].State)
			all, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{})
			require.NoError(t, err)
			require.Len(t, all, 8)
		})
	}
}

// A replay, discard, purge or outbox retry whose context ends during its
// last batch has done all it was asked: it returns no error, and is
// recorded as finished with its count, whether that batch was short or
// full.
func TestAuditInterruptedLastBatchIsFinished(t *testing.T) {
	t.Parallel()
	for _, n := range []int{18, 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			b := setup(t, admin.Config{})
			b.add(t, "payments", "dead", n, pgbox.InboxDead, "gateway timeout", 0)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			last := func(done int64) {
				if done == int64(n) {
					cancel()
				}
			}

			replayed, err := b.adm.Replay(ctx, admin.ReplayOptions{BatchSize: 5, Filter: admin.Filter{Statuses: []pgbox.InboxStatus{pgbox.InboxDead}},
				ProgressFunc: last})
			require.NoError(t, err)
			require.EqualValues(t, n, replayed)
			require.Error(t, ctx.Err(), "the context did end")

			b.exec(t, "UPDATE /* schema */inbox SET status = 'dead'")
			ctx, cancel = context.WithCancel(context.Background())
			defer cancel()
			discarded, err := b.adm.Discard(ctx, admin.DiscardOptions{BatchSize: 5, Reason: "drill", ProgressFunc: last})
			require.NoError(t, err)
			require.EqualValues(t, n, discarded)

			b.exec(t, "UPDATE /* schema */inbox SET status = 'done', processed_at = now() - interval '2 hours'")
			ctx, cancel = context.WithCancel(context.Background())
			defer cancel()
			purged, err := b.adm.Purge(ctx, admin.PurgeOptions{BatchSize: 5, Status: pgbox.InboxDone, OlderThan: time.Hour, ProgressFunc: last})
			require.NoError(t, err)
			require.EqualValues(t, n, purged)

			b.outboxRows(t, n, pgbox.OutboxDead)
			ctx, cancel = context.WithCancel(context.Background())
			defer cancel()
			retried, err := b.adm.OutboxRetry(ctx, admin.OutboxRetryOptions{BatchSize: 5, ProgressFunc: last})
			require.NoError(t, err)
			require.EqualValues(t, n, retried)

			records, err := b.adm.AuditLog(context.Background(), admin.AuditLogOptions{})
			require.NoError(t, err)
			require.Len(t, records, 4)
			for _, r := range records {
				require.Equal(t, []any{admin.AuditFinished, int64(n)}, []any{r.State, r.Affected}, r.Action)
			}
		})
	}
}
