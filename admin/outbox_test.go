package admin_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// outboxRows stores n outbox rows in status, on topic orders, with their
// five publish attempts used when dead, and returns their ids.
func (b *testBundle) outboxRows(t *testing.T, n int, status pgbox.OutboxStatus) []uuid.UUID {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), ident.Render(`
		INSERT INTO /* schema */outbox (id, topic, event_type, status, attempts, payload, last_error, published_at, bucket)
		SELECT r.id, 'orders', 'OrderPlaced', $1,
		       CASE WHEN $1 = 'dead' THEN 5 ELSE 0 END, ''::bytea,
		       CASE WHEN $1 = 'dead' THEN 'broker unreachable' END,
		       CASE WHEN $1 = 'published' THEN now() END, /* schema */outbox_bucket(r.id)
		FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, $2)) AS r
		RETURNING id`, b.schema), string(status), n)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

// outboxCount counts the outbox rows matching where, through db.
func (b *testBundle) outboxCount(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, where string, args ...any) int {
	t.Helper()
	var n int
	err := db.QueryRow(context.Background(), ident.Render("SELECT count(*) FROM /* schema */outbox WHERE "+where, b.schema), args...).Scan(&n)
	require.NoError(t, err)
	return n
}

// OutboxRetry puts every dead row back to pending in batches, or only the
// named ones, and never a row that is not dead.
func TestOutboxRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	dead := b.outboxRows(t, 11, pgbox.OutboxDead)
	b.outboxRows(t, 2, pgbox.OutboxPending)
	published := b.outboxRows(t, 2, pgbox.OutboxPublished)

	// By id: a published row named with a dead one is left alone.
	n, err := b.adm.OutboxRetry(ctx, admin.OutboxRetryOptions{IDs: []uuid.UUID{dead[0], published[0]}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, 1, b.outboxCount(t, b.pool, "id = $1 AND status = 'pending' AND attempts = 0 AND replays = 1", dead[0]))
	require.Equal(t, 2, b.outboxCount(t, b.pool, "status = 'published' AND replays = 0"))

	// An empty list names no row.
	n, err = b.adm.OutboxRetry(ctx, admin.OutboxRetryOptions{IDs: []uuid.UUID{}})
	require.NoError(t, err)
	require.Zero(t, n)

	// Every dead row, in batches of 4.
	report, reports := progress()
	n, err = b.adm.OutboxRetry(ctx, admin.OutboxRetryOptions{BatchSize: 4, ProgressFunc: report})
	require.NoError(t, err)
	require.EqualValues(t, 10, n)
	require.Equal(t, []int64{4, 8, 10}, *reports)
	require.Zero(t, b.outboxCount(t, b.pool, "status = 'dead'"))
	require.Equal(t, 11, b.outboxCount(t, b.pool, `status = 'pending' AND attempts = 0 AND replays = 1
		AND available_at <= now() AND errors->-1->>'action' = 'retried' AND (errors->-1->>'previous_attempts')::int = 5`))
	require.Equal(t, 2, b.outboxCount(t, b.pool, "status = 'published'"))

	d, err := b.adm.OutboxShow(ctx, dead[3])
	require.NoError(t, err)
	require.Equal(t, pgbox.OutboxPending, d.Status)
	require.Equal(t, "retried", d.History[len(d.History)-1].Action)
}

// Through a pool whose query mode sends parameters without their types (as
// a user behind PgBouncer may configure), OutboxRetry puts back the rows it
// names, then every dead row.
func TestOutboxRetryInUntypedQueryModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.UntypedModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupOn(t, pgtest.NewPoolMode(t, mode, 2), admin.Config{})
			dead := b.outboxRows(t, 5, pgbox.OutboxDead)

			n, err := b.adm.OutboxRetry(ctx, admin.OutboxRetryOptions{IDs: dead[:2]})
			require.NoError(t, err)
			require.EqualValues(t, 2, n)
			require.Equal(t, 2, b.outboxCount(t, b.pool, "id = ANY($1::uuid[]) AND status = 'pending'", []string{dead[0].String(), dead[1].String()}))

			n, err = b.adm.OutboxRetry(ctx, admin.OutboxRetryOptions{BatchSize: 2})
			require.NoError(t, err)
			require.EqualValues(t, 3, n)
			require.Zero(t, b.outboxCount(t, b.pool, "status = 'dead'"))
		})
	}
}

func TestOutboxRetryTx(t *testing.T) {
	t.Parallel()
	inCallerTx(t, func(t *testing.T, b *testBundle, tx pgx.Tx) (func(), func()) {
		b.outboxRows(t, 7, pgbox.OutboxDead)
		b.outboxRows(t, 1, pgbox.OutboxPublished)
		n, err := b.adm.OutboxRetryTx(context.Background(), tx, admin.OutboxRetryOptions{BatchSize: 3})
		require.NoError(t, err)
		require.EqualValues(t, 7, n)
		require.Zero(t, b.outboxCount(t, tx, "status = 'dead'"), "the transaction sees its retry")
		require.Equal(t, 7, b.outboxCount(t, b.pool, "status = 'dead'"), "nobody else does before it commits")
		return func() {
				require.Equal(t, 7, b.outboxCount(t, b.pool, "status = 'dead' AND replays = 0"))
			}, func() {
				require.Equal(t, 7, b.outboxCount(t, b.pool, "status = 'pending' AND replays = 1"))
				require.Equal(t, 1, b.outboxCount(t, b.pool, "status = 'published'"))
			}
	})
}

// OutboxList refuses an unknown status, naming the valid ones.
func TestOutboxListUnknownStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{})
	err := b.adm.OutboxList(context.Background(), admin.OutboxListOptions{Filter: admin.OutboxFilter{Statuses: []pgbox.OutboxStatus{"done"}}},
		func(admin.OutboxMessage) error { return nil })
	require.EqualError(t, err, `unknown outbox status "done": use one of pending, running, published, dead`)
}
