package partition_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is one test's schema, its inbox, and helpers to look at
// where rows landed.
type testBundle struct {
	inbox  *inbox.Inbox
	pool   *pgxpool.Pool
	schema string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{pool: pgtest.Pool(t), schema: pgtest.Schema(t)}
	var err error
	b.inbox, err = inbox.New(b.pool, inbox.Config{Consumer: "payments", Schema: b.schema, RecentIDs: -1})
	require.NoError(t, err)
	return b
}

func (b *testBundle) sql(q string) string { return ident.Render(q, b.schema) }

func (b *testBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), b.sql(q), args...)
	require.NoError(t, err)
}

// today is the database's day.
func (b *testBundle) today(t *testing.T) partition.Day {
	t.Helper()
	var now time.Time
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT now()").Scan(&now))
	return partition.DayOf(now)
}

// receive stores a message with id, failing the test on an error, and
// returns its outcome.
func (b *testBundle) receive(t *testing.T, id, payload string) inbox.Outcome {
	t.Helper()
	o, err := b.inbox.Receive(context.Background(), inbox.Message{ID: id, EventType: "E", Payload: []byte(payload)})
	if err != nil {
		require.ErrorIs(t, err, inbox.ErrPayloadConflict)
	}
	return o
}

// where returns the partition holding the inbox row of id, "" for none.
func (b *testBundle) where(t *testing.T, id string) string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		b.sql("SELECT tableoid::regclass::text FROM /* schema */inbox WHERE consumer = 'payments' AND message_id = $1"), id)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.LessOrEqual(t, len(tables), 1, "message %s is stored %d times", id, len(tables))
	if len(tables) == 0 {
		return ""
	}
	return unqualified(tables[0])
}

// unqualified strips a schema from a regclass's text.
func unqualified(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '.' {
			return name[i+1:]
		}
	}
	return name
}

// requireStoredOnce fails unless every message of the inbox is stored
// once: no id in two partitions.
func (b *testBundle) requireStoredOnce(t *testing.T) {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), b.sql(`
		SELECT message_id || ' in ' || string_agg(tableoid::regclass::text, ', ')
		FROM /* schema */inbox GROUP BY consumer, message_id HAVING count(*) > 1`))
	require.NoError(t, err)
	twice, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, twice, "messages stored more than once")
}

// maintain runs partition.Maintain on the bundle's schema with the
// retentions given and a lock timeout of a second, and returns its report.
func (b *testBundle) maintain(t *testing.T, opts partition.Options) partition.Report {
	t.Helper()
	opts.Ahead = max(opts.Ahead, partition.AheadDefault)
	if opts.LockTimeout == 0 {
		opts.LockTimeout = time.Second
	}
	if opts.MaxKept == 0 {
		opts.MaxKept = 10_000
	}
	r, err := partition.Maintain(context.Background(), b.pool, b.schema, opts)
	require.NoError(t, err)
	return r
}
