package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// testBundle is one test's Admin on a freshly migrated schema of its own.
type testBundle struct {
	adm    *admin.Admin
	pool   *pgxpool.Pool
	schema string
}

// setup returns a testBundle whose Admin has cfg (its Schema filled in).
func setup(t *testing.T, cfg admin.Config) *testBundle {
	t.Helper()
	return setupOn(t, pgtest.Pool(t), cfg)
}

// setupOn is setup with the Admin, and the test's own queries, on pool.
func setupOn(t *testing.T, pool *pgxpool.Pool, cfg admin.Config) *testBundle {
	t.Helper()
	cfg.Schema = pgtest.Schema(t)
	adm, err := admin.New(pool, cfg)
	require.NoError(t, err)
	return &testBundle{adm: adm, pool: pool, schema: cfg.Schema}
}

// inCallerTx runs work in a subtest for each way a caller's transaction
// ends: "RolledBack" and "Committed". work gets a fresh bundle and the open
// transaction; it does its part in tx, checks what tx and everybody else
// see before the end, and returns the checks to make after a rollback and
// after a commit.
func inCallerTx(t *testing.T, work func(t *testing.T, b *testBundle, tx pgx.Tx) (rolledBack, committed func())) {
	t.Helper()
	for _, commit := range []bool{false, true} {
		t.Run(map[bool]string{false: "RolledBack", true: "Committed"}[commit], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, admin.Config{})
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			rolledBack, committed := work(t, b, tx)
			if !commit {
				require.NoError(t, tx.Rollback(ctx))
				rolledBack()
				return
			}
			require.NoError(t, tx.Commit(ctx))
			committed()
		})
	}
}

// exec runs query, with "/* schema */" naming the bundle's schema.
func (b *testBundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), ident.Render(query, b.schema), args...)
	require.NoError(t, err)
}

// add stores n messages of consumer in status, with ids prefix-1 to
// prefix-n, received (and, when done, processed) age ago. lastError, if
// not empty, is their last error, with their three attempts used.
func (b *testBundle) add(t *testing.T, consumer, prefix string, n int, status pgbox.InboxStatus, lastError string, age time.Duration) {
	t.Helper()
	var lastErr any
	if lastError != "" {
		lastErr = lastError
	}
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts,
		                               payload_hash, payload, last_error, received_at, processed_at, bucket)
		SELECT $1, $2 || '-' || g, 'ChargeCard', $3, CASE WHEN $4::text IS NULL THEN 0 ELSE 3 END, 3,
		       '\x00'::bytea, ''::bytea, $4, now() - $5 * interval '1 millisecond',
		       CASE WHEN $3 = 'done' THEN now() - $5 * interval '1 millisecond' END, /* schema */inbox_bucket($2 || '-' || g)
		FROM generate_series(1, $6) AS g`,
		consumer, prefix, string(status), lastErr, age.Milliseconds(), n)
}

// count counts the inbox rows matching where, through db (the pool, or a
// transaction to see its own changes).
func (b *testBundle) count(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, where string, args ...any) int {
	t.Helper()
	var n int
	err := db.QueryRow(context.Background(), ident.Render("SELECT count(*) FROM /* schema */inbox WHERE "+where, b.schema), args...).Scan(&n)
	require.NoError(t, err)
	return n
}

// snapshot returns every inbox row's identity and mutable state, to show
// that a refused call changed nothing.
func (b *testBundle) snapshot(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), ident.Render(`
		SELECT concat_ws(' ', consumer, message_id, status, attempts, replays, available_at, errors::text)
		FROM /* schema */inbox ORDER BY consumer, message_id`, b.schema))
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// progress returns a ProgressFunc that records each report, and the
// reports so far.
func progress() (func(int64), *[]int64) {
	var got []int64
	return func(n int64) { got = append(got, n) }, &got
}

// mixed stores, for consumer payments, 25 dead, 5 discarded and 4 failing
// (pending after a failure) messages, which Replay may touch, and 3 fresh
// pending, 3 running and 3 done ones, which it may not; and 4 dead ones
// of consumer shipping.
func (b *testBundle) mixed(t *testing.T) {
	t.Helper()
	b.add(t, "payments", "dead", 25, pgbox.InboxDead, "gateway timeout", 0)
	b.add(t, "payments", "discarded", 5, pgbox.InboxDiscarded, "gateway timeout", 0)
	b.add(t, "payments", "failing", 4, pgbox.InboxPending, "gateway timeout", 0)
	b.add(t, "payments", "fresh", 3, pgbox.InboxPending, "", 0)
	b.add(t, "payments", "running", 3, pgbox.InboxRunning, "", 0)
	b.add(t, "payments", "done", 3, pgbox.InboxDone, "", 0)
	b.add(t, "shipping", "dead", 4, pgbox.InboxDead, "carrier down", 0)
}

// Replay walks the replayable messages in batches, replaying each exactly
// once although a replayed message (pending, still with its last error)
// matches the filter again, and leaves running, done, fresh and other
// consumers' messages alone.
func TestReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.mixed(t)

	report, reports := progress()
	n, err := b.adm.Replay(ctx, admin.ReplayOptions{
		BatchSize:    7,
		Filter:       admin.Filter{Consumer: "payments"},
		Note:         "gateway fixed",
		ProgressFunc: report,
	})
	require.NoError(t, err)
	require.EqualValues(t, 29, n, "25 dead and 4 failing")
	require.Equal(t, []int64{7, 14, 21, 28, 29}, *reports, "one report per batch of 7")

	require.Equal(t, 29, b.count(t, b.pool, `status = 'pending' AND attempts = 0 AND replays = 1
		AND available_at <= now() AND errors->-1->>'action' = 'replayed' AND errors->-1->>'note' = 'gateway fixed'`),
		"each replayed once: pending, due now, attempts zeroed, with the replay in its history")
	require.Equal(t, 2, b.count(t, b.pool, `errors->-1->>'previous_status' = 'dead' AND message_id = ANY($1)`, []string{"dead-1", "dead-25"}))
	require.Equal(t, 3, b.count(t, b.pool, "message_id LIKE 'running-%' AND status = 'running' AND replays = 0"), "running messages are never replayed")
	require.Equal(t, 3, b.count(t, b.pool, "message_id LIKE 'done-%' AND status = 'done' AND replays = 0"), "done messages are never replayed")
	require.Equal(t, 3, b.count(t, b.pool, "message_id LIKE 'fresh-%' AND replays = 0"), "a pending message that never failed is not replayed")
	require.Equal(t, 4, b.count(t, b.pool, "consumer = 'shipping' AND status = 'dead' AND replays = 0"), "another consumer's messages are left alone")
	require.Equal(t, 5, b.count(t, b.pool, "status = 'discarded' AND replays = 0"), "a discard is not undone unless asked for")

	// Discarded messages are replayed when named: by status, or by id.
	n, err = b.adm.Replay(ctx, admin.ReplayOptions{Filter: admin.Filter{Consumer: "payments", IDs: []string{"discarded-5"}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	n, err = b.adm.Replay(ctx, admin.ReplayOptions{Filter: admin.Filter{Consumer: "payments", Statuses: []pgbox.InboxStatus{pgbox.InboxDiscarded}}})
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	require.Zero(t, b.count(t, b.pool, "status = 'discarded'"))

	// Named one by one, running and done messages are still refused.
	n, err = b.adm.Replay(ctx, admin.ReplayOptions{Filter: admin.Filter{Consumer: "payments", IDs: []string{"running-1", "done-1"}}})
	require.NoError(t, err)
	require.Zero(t, n)
}

// Replay without a BatchSize works in Config.BatchSize batches.
func TestReplayUsesConfigBatchSize(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{BatchSize: 10})
	b.add(t, "payments", "dead", 25, pgbox.InboxDead, "gateway timeout", 0)

	report, reports := progress()
	n, err := b.adm.Replay(context.Background(), admin.ReplayOptions{ProgressFunc: report})
	require.NoError(t, err)
	require.EqualValues(t, 25, n)
	require.Equal(t, []int64{10, 20, 25}, *reports)
}

// A failure group's fingerprint, from Failures, replays that group and
// nothing else.
func TestReplayByFingerprint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		SELECT 'payments', 'timeout-' || g, 'ChargeCard', CASE WHEN g <= 4 THEN 'dead' ELSE 'pending' END, 3, 3,
		       '\x00'::bytea, ''::bytea, 'gateway timeout after ' || g || 's on order ''order-' || g || '''', /* schema */inbox_bucket('timeout-' || g)
		FROM generate_series(1, 6) AS g
		UNION ALL
		SELECT 'payments', 'declined-' || g, 'ChargeCard', 'dead', 3, 3, '\x00'::bytea, ''::bytea, 'card declined', /* schema */inbox_bucket('declined-' || g)
		FROM generate_series(1, 3) AS g`)

	groups, err := b.adm.Failures(ctx, admin.FailuresOptions{Consumer: "payments"})
	require.NoError(t, err)
	require.Len(t, groups, 2)
	timeouts := groups[0]
	require.Equal(t, "gateway timeout after <n>s on order '<str>'", timeouts.Normalized)
	require.Equal(t, []int64{6, 4, 2}, []int64{timeouts.Count, timeouts.Dead, timeouts.Failing})
	require.Equal(t, "card declined", groups[1].Normalized)

	n, err := b.adm.Replay(ctx, admin.ReplayOptions{BatchSize: 4, Filter: admin.Filter{Fingerprint: timeouts.Fingerprint}})
	require.NoError(t, err)
	require.EqualValues(t, 6, n)
	require.Equal(t, 6, b.count(t, b.pool, "message_id LIKE 'timeout-%' AND replays = 1"))
	require.Equal(t, 3, b.count(t, b.pool, "message_id LIKE 'declined-%' AND status = 'dead' AND replays = 0"), "the other group is left alone")
}

// ReplayTx changes nothing unless the caller's transaction commits; its
// changes are visible inside that transaction.
func TestReplayTx(t *testing.T) {
	t.Parallel()
	inCallerTx(t, func(t *testing.T, b *testBundle, tx pgx.Tx) (func(), func()) {
		b.mixed(t)
		before := b.snapshot(t)
		report, reports := progress()
		n, err := b.adm.ReplayTx(context.Background(), tx, admin.ReplayOptions{
			BatchSize: 10, Filter: admin.Filter{Consumer: "payments"}, Note: "in tx", ProgressFunc: report})
		require.NoError(t, err)
		require.EqualValues(t, 29, n)
		require.Equal(t, []int64{10, 20, 29}, *reports)
		require.Equal(t, 29, b.count(t, tx, "replays = 1"), "the transaction sees its replay")
		require.Equal(t, before, b.snapshot(t), "nobody else does before it commits")
		return func() {
				require.Equal(t, before, b.snapshot(t), "a rolled-back replay changes nothing")
			}, func() {
				require.Equal(t, 29, b.count(t, b.pool, "status = 'pending' AND replays = 1 AND errors->-1->>'note' = 'in tx'"))
				require.Equal(t, 3, b.count(t, b.pool, "status = 'running'"))
				require.Equal(t, 3, b.count(t, b.pool, "status = 'done'"))
			}
	})
}

// Discard sets aside only dead messages, in batches, with the reason in
// their history.
func TestDiscard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.mixed(t)

	report, reports := progress()
	n, err := b.adm.Discard(ctx, admin.DiscardOptions{
		BatchSize:    10,
		Filter:       admin.Filter{Consumer: "payments"},
		ProgressFunc: report,
		Reason:       "refunded by hand",
	})
	require.NoError(t, err)
	require.EqualValues(t, 25, n, "only the dead ones")
	require.Equal(t, []int64{10, 20, 25}, *reports)
	require.Equal(t, 30, b.count(t, b.pool, "consumer = 'payments' AND status = 'discarded'"))
	require.Equal(t, 4, b.count(t, b.pool, "message_id LIKE 'failing-%' AND status = 'pending'"), "failing messages are not dead: they stay")
	require.Equal(t, 4, b.count(t, b.pool, "consumer = 'shipping' AND status = 'dead'"))

	d, err := b.adm.Show(ctx, "payments", "dead-7")
	require.NoError(t, err)
	require.Equal(t, pgbox.InboxDiscarded, d.Status)
	require.Equal(t, "discarded", d.History[len(d.History)-1].Action)
	require.Equal(t, "refunded by hand", d.History[len(d.History)-1].Note)
}

func TestDiscardTx(t *testing.T) {
	t.Parallel()
	inCallerTx(t, func(t *testing.T, b *testBundle, tx pgx.Tx) (func(), func()) {
		b.mixed(t)
		before := b.snapshot(t)
		n, err := b.adm.DiscardTx(context.Background(), tx, admin.DiscardOptions{BatchSize: 4, Filter: admin.Filter{Consumer: "shipping"}, Reason: "carrier gone"})
		require.NoError(t, err)
		require.EqualValues(t, 4, n)
		require.Equal(t, before, b.snapshot(t), "nothing shows before the commit")
		return func() {
				require.Equal(t, before, b.snapshot(t))
			}, func() {
				require.Equal(t, 4, b.count(t, b.pool, "consumer = 'shipping' AND status = 'discarded'"))
				require.Equal(t, 25, b.count(t, b.pool, "consumer = 'payments' AND status = 'dead'"))
			}
	})
}

// purgeFixture stores, for consumer payments, 9 done messages processed two
// days ago and 2 processed now, 3 discarded received two days ago, and 4
// dead received two days ago; and 2 old done ones of consumer shipping.
func (b *testBundle) purgeFixture(t *testing.T) {
	t.Helper()
	const old = 48 * time.Hour
	b.add(t, "payments", "old", 9, pgbox.InboxDone, "", old)
	b.add(t, "payments", "new", 2, pgbox.InboxDone, "", 0)
	b.add(t, "payments", "olddiscarded", 3, pgbox.InboxDiscarded, "gateway timeout", old)
	b.add(t, "payments", "olddead", 4, pgbox.InboxDead, "gateway timeout", old)
	b.add(t, "shipping", "old", 2, pgbox.InboxDone, "", old)
}

// Purge deletes old done (or discarded) messages in batches, counted
// beforehand by CountPurgeable, and never a dead one.
func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.purgeFixture(t)

	report, reports := progress()
	opts := admin.PurgeOptions{BatchSize: 4, Consumer: "payments", OlderThan: 24 * time.Hour, ProgressFunc: report, Status: pgbox.InboxDone}
	n, err := b.adm.CountPurgeable(ctx, opts)
	require.NoError(t, err)
	require.EqualValues(t, 9, n)

	n, err = b.adm.Purge(ctx, opts)
	require.NoError(t, err)
	require.EqualValues(t, 9, n)
	require.Equal(t, []int64{4, 8, 9}, *reports)
	require.Zero(t, b.count(t, b.pool, "message_id LIKE 'old-%' AND consumer = 'payments'"))
	require.Equal(t, 2, b.count(t, b.pool, "message_id LIKE 'new-%'"), "recent done messages are kept")
	require.Equal(t, 2, b.count(t, b.pool, "consumer = 'shipping'"), "another consumer's are kept")
	n, err = b.adm.CountPurgeable(ctx, opts)
	require.NoError(t, err)
	require.Zero(t, n)

	// Discarded ones go by when they were received; every consumer's.
	n, err = b.adm.Purge(ctx, admin.PurgeOptions{Status: pgbox.InboxDiscarded, OlderThan: 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)

	// However old, dead messages stay: even a purge of everything done
	// and discarded, at any age, leaves them.
	for _, status := range []pgbox.InboxStatus{pgbox.InboxDone, pgbox.InboxDiscarded} {
		_, err := b.adm.Purge(ctx, admin.PurgeOptions{Status: status})
		require.NoError(t, err)
	}
	require.Equal(t, 4, b.count(t, b.pool, "status = 'dead'"), "dead rows are never purged")
	require.Equal(t, 4, b.count(t, b.pool, "true"))
}

func TestPurgeTx(t *testing.T) {
	t.Parallel()
	inCallerTx(t, func(t *testing.T, b *testBundle, tx pgx.Tx) (func(), func()) {
		b.purgeFixture(t)
		before := b.snapshot(t)
		report, reports := progress()
		n, err := b.adm.PurgeTx(context.Background(), tx, admin.PurgeOptions{BatchSize: 3, OlderThan: 24 * time.Hour, ProgressFunc: report, Status: pgbox.InboxDone})
		require.NoError(t, err)
		require.EqualValues(t, 11, n)
		require.Equal(t, []int64{3, 6, 9, 11}, *reports)
		require.Equal(t, before, b.snapshot(t), "nothing is deleted for others before the commit")
		return func() {
				require.Equal(t, before, b.snapshot(t))
			}, func() {
				require.Zero(t, b.count(t, b.pool, "message_id LIKE 'old-%'"))
				require.Equal(t, 2+3+4, b.count(t, b.pool, "true"))
			}
	})
}

// A call with bad input is refused before it touches anything, with an
// error that says what is wrong.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()

	var since = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		call    func(ctx context.Context, adm *admin.Admin, tx pgx.Tx) error
		wantErr string
	}{
		{"ReplayUnknownStatus", func(ctx context.Context, adm *admin.Admin, _ pgx.Tx) error {
			_, err := adm.Replay(ctx, admin.ReplayOptions{Filter: admin.Filter{Statuses: []pgbox.InboxStatus{"deda"}}})
			return err
		}, `unknown status "deda": use one of pending, running, done, dead, discarded`},
		{"ReplayUntilBeforeSince", func(ctx context.Context, adm *admin.Admin, _ pgx.Tx) error {
			_, err := adm.Replay(ctx, admin.ReplayOptions{Filter: admin.Filter{Since: since, Until: since.Add(-time.Hour)}})
			return err
		}, "until (2026-11-23T11:00:00Z) is not after since (2026-11-23T12:00:00Z)"},
		{"ReplayTxNegativeBatchSize", func(ctx context.Context, adm *admin.Admin, tx pgx.Tx) error {
			_, err := adm.ReplayTx(ctx, tx, admin.ReplayOptions{BatchSize: -1})
			return err
		}, "ReplayOptions.BatchSize is -1"},
		{"DiscardWithoutReason", func(ctx context.Context, adm *admin.Admin, _ pgx.Tx) error {
			_, err := adm.Discard(ctx, admin.DiscardOptions{Filter: admin.Filter{Consumer: "payments"}})
			return err
		}, "discard: a reason is required"},
		{"DiscardTxWithoutReason", func(ctx context.Context, adm *admin.Admin, tx pgx.Tx) error {
			_, err := adm.DiscardTx(ctx, tx, admin.DiscardOptions{})
			return err
		}, "discard: a reason is required"},
		{"DiscardUnknownStatus", func(ctx context.Context, adm *admin.Admin, _ pgx.Tx) error {
			_, err := adm.Discard(ctx, admin.DiscardOptions{Filter: admin.Filter{Statuses: []pgbox.InboxStatus{"Dead"}}, Reason: "x"})
			return err
		}, `unknown status "Dead"`},
		{"PurgeDead", func(ctx context.Context, adm *admin.Admin, _ pgx.Tx) error {
			_, err := adm.Purge(ctx, admin.PurgeOptions{Status: pgbox.InboxDead})
			return err
		}, `only done or discarded messages can be purged, not "dead"`},
		{"PurgeWithoutStatus", func(ctx context.Context, adm *admin.Admin, _ pgx.Tx) error {
			_, err := adm.Purge(ctx, admin.PurgeOptions{OlderThan: time.Hour})
			return err
		}, `only done or discarded messages can be purged, not ""`},
		{"PurgeTxPending", func(ctx context.Context, adm *admin.Admin, tx pgx.Tx) error {
			_, err := adm.PurgeTx(ctx, tx, admin.PurgeOptions{Status: pgbox.InboxPending})
			return err
		}, `not "pending"`},
		{"CountPurgeableRunning", func(ctx context.Context, adm *admin.Admin, _ pgx.Tx) error {
			_, err := adm.CountPurgeable(ctx, admin.PurgeOptions{Status: pgbox.InboxRunning})
			return err
		}, `not "running"`},
		{"PurgeNegativeBatchSize", func(ctx context.Context, adm *admin.Admin, _ pgx.Tx) error {
			_, err := adm.Purge(ctx, admin.PurgeOptions{BatchSize: -5, Status: pgbox.InboxDone})
			return err
		}, "PurgeOptions.BatchSize is -5"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, admin.Config{})
			b.mixed(t)
			b.purgeFixture(t)
			before := b.snapshot(t)

			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			err = tt.call(ctx, b.adm, tx)
			require.ErrorContains(t, err, tt.wantErr)
			require.NoError(t, tx.Commit(ctx), "the caller's transaction is still usable")
			require.Equal(t, before, b.snapshot(t))
		})
	}
}

// New fills in the defaults and refuses a bad Config naming the field.
func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		cfg := admin.Config{}.WithDefaults()
		require.Equal(t, admin.Config{BatchSize: admin.BatchSizeDefault, Schema: pgbox.DefaultSchema}, cfg)
		adm, err := admin.New(pgtest.Pool(t), admin.Config{})
		require.NoError(t, err)
		require.Equal(t, pgbox.DefaultSchema, adm.Schema())
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		_, err := admin.New(nil, admin.Config{})
		require.ErrorContains(t, err, "admin: pool is nil")
		_, err = admin.New(pgtest.Pool(t), admin.Config{BatchSize: -1})
		require.ErrorContains(t, err, "admin: Config.BatchSize is -1")
		_, err = admin.New(pgtest.Pool(t), admin.Config{Schema: strings.Repeat("s", 64)})
		require.ErrorContains(t, err, "admin: Config.Schema: ")
	})
}
