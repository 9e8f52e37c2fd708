package maintenance_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is one test's schema and helpers.
type testBundle struct {
	schema string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{schema: pgtest.Schema(t)}
}

func (b *testBundle) sql(q string) string { return ident.Render(q, b.schema) }

func (b *testBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := pgtest.Pool(t).Exec(context.Background(), b.sql(q), args...)
	require.NoError(t, err)
}

func (b *testBundle) count(t *testing.T, q string, args ...any) (n int64) {
	t.Helper()
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), b.sql(q), args...).Scan(&n))
	return n
}

// waitFor polls the boolean query q until it is true, or fails the test
// after a minute.
func (b *testBundle) waitFor(t *testing.T, q string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := 5 * time.Millisecond
	for {
		var ok bool
		err := pgtest.Pool(t).QueryRow(ctx, b.sql(q), args...).Scan(&ok)
		if err == nil && ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s (last error: %v)", q, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// start starts a Maintainer on the bundle's schema and stops it when the
// test ends.
func (b *testBundle) start(t *testing.T, cfg maintenance.Config) *maintenance.Maintainer {
	t.Helper()
	return b.startOn(t, pgtest.Pool(t), cfg)
}

// startOn is start with a pool of the test's choosing.
func (b *testBundle) startOn(t *testing.T, pool *pgxpool.Pool, cfg maintenance.Config) *maintenance.Maintainer {
	t.Helper()
	cfg.Schema = b.schema
	m, err := maintenance.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, m.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, m.Stop(ctx))
	})
	return m
}

// job is a completed maintenance job as River recorded it.
type job struct {
	AttemptedBy []string
	Attempt     int
	EnqueuedBy  string
	Output      json.RawMessage
	ScheduledAt time.Time
}

// completedJobs reads the completed jobs of kind, oldest first.
func (b *testBundle) completedJobs(t *testing.T, kind string) []job {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(context.Background(), b.sql(`
		SELECT attempted_by, attempt, args->>'enqueued_by', coalesce(metadata->'output', 'null'), scheduled_at
		FROM /* schema */river_job WHERE kind = $1 AND state = 'completed' ORDER BY scheduled_at, id`), kind)
	require.NoError(t, err)
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (job, error) {
		var j job
		err := r.Scan(&j.AttemptedBy, &j.Attempt, &j.EnqueuedBy, &j.Output, &j.ScheduledAt)
		return j, err
	})
	require.NoError(t, err)
	return jobs
}

// directPool returns a pool of at most maxConns connections straight to the
// test database (pgtest.DirectURL), even when the tests run through a
// pooler, closed when the test ends.
func directPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DirectURL(t))
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
