package migrations_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/migrations"
)

// bouncerPool returns a pool through the PgBouncer (transaction pooling)
// at PGBOUNCER_URL, in front of the test database, and skips the test when
// PGBOUNCER_URL is unset. Unless the URL picks a query exec mode, it uses
// exec: pgx's default statement cache needs a session, which transaction
// pooling does not give (PgBouncer 1.18 has no prepared-statement support).
func bouncerPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	raw := os.Getenv("PGBOUNCER_URL")
	if raw == "" {
		t.Skip("PGBOUNCER_URL is unset: start a PgBouncer in transaction pooling mode in front of the test database " +
			"(PGBOUNCER_URL=$(scripts/pgbouncer.sh up \"$DATABASE_URL\")) to run the tests that migrate through it")
	}
	u, err := url.Parse(raw)
	require.NoError(t, err, "PGBOUNCER_URL")
	q := u.Query()
	if q.Get("default_query_exec_mode") == "" {
		q.Set("default_query_exec_mode", "exec")
		u.RawQuery = q.Encode()
	}
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err, "PGBOUNCER_URL")
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// The tests check through a direct connection what happened through
	// the pooler: both must reach the same database.
	type server struct {
		Database string
		Port     int32
	}
	const whoSQL = "SELECT pg_catalog.current_database(), pg_catalog.inet_server_port()"
	var viaBouncer, direct server
	require.NoError(t, pool.QueryRow(context.Background(), whoSQL).Scan(&viaBouncer.Database, &viaBouncer.Port),
		"connect through PGBOUNCER_URL")
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), whoSQL).Scan(&direct.Database, &direct.Port))
	require.Equal(t, direct, viaBouncer, "PGBOUNCER_URL must lead to the test database (DATABASE_URL)")
	return pool
}

// Through a transaction-pooling PgBouncer, Up puts every table in the
// schema, Down and DownTo take them away again, and the lock is released.
func TestPgBouncerMigrateUpAndDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := bouncerPool(t, 4)
	direct := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)

	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()

	applied, err := m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, applied, pgbox.SchemaVersion)
	require.Subset(t, tablesIn(t, direct, schema),
		append([]string{pgbox.MigrationsTable, "river_job", "river_leader", "river_migration", "river_queue"}, migrations.PGBoxTables...))
	require.NotContains(t, tablesIn(t, direct, "public"), "inbox", "nothing may land in public")
	require.NoError(t, pgbox.CheckSchema(ctx, pool, schema))
	require.Zero(t, advisoryLocksHeld(t, direct, schema), "the migration lock must not outlive the migration")

	st, err := m.Status(ctx)
	require.NoError(t, err)
	for _, s := range st {
		require.True(t, s.Applied, "%s must show as applied through the pooler", s.Name)
	}

	res, err := m.Down(ctx)
	require.NoError(t, err)
	require.EqualValues(t, pgbox.SchemaVersion, res.Version)
	v, err := m.Version(ctx)
	require.NoError(t, err)
	require.EqualValues(t, pgbox.SchemaVersion-1, v)

	down, err := m.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, down, pgbox.SchemaVersion-1)
	require.Equal(t, []string{pgbox.MigrationsTable}, tablesIn(t, direct, schema), "only goose's version table stays")
	require.Zero(t, advisoryLocksHeld(t, direct, schema))

	again, err := m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, again, pgbox.SchemaVersion)
}

// Migrators starting at once through the pooler wait for each other: each
// migration, pgbox's and River's, is applied exactly once.
func TestPgBouncerConcurrentMigratorsAreSerialized(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)

	const migrators = 6
	errs := make([]error, migrators)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range migrators {
		pool := bouncerPool(t, 2)
		wg.Go(func() {
			<-start
			errs[i] = migrations.Migrate(ctx, pool, migrations.Options{Schema: schema})
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))

	var applied, riverApplied int
	require.NoError(t, direct.QueryRow(ctx, ident.Render(
		"SELECT count(*) FROM /* schema */"+pgbox.MigrationsTable+" WHERE version_id > 0", schema)).Scan(&applied))
	require.Equal(t, pgbox.SchemaVersion, applied, "each migration must be applied exactly once")
	m, err := migrations.New(direct, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()
	_, want, err := m.RiverVersion(ctx)
	require.NoError(t, err)
	require.NoError(t, direct.QueryRow(ctx, ident.Render("SELECT count(*) FROM /* schema */river_migration", schema)).Scan(&riverApplied))
	require.Equal(t, want, riverApplied, "each of River's migrations must be applied exactly once")
	require.Zero(t, advisoryLocksHeld(t, direct, schema), "no server connection may keep the lock")
}
