package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/migrations"
)

// Through a transaction-pooling PgBouncer, Up puts every table in the
// schema, Down and DownTo take them away again, and the lock is released.
func TestPgBouncerMigrateUpAndDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.BouncerPool(t, 4)
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
		pool := pgtest.BouncerPool(t, 2)
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

// poolerPoolSize is how many server connections the PgBouncer at
// PGBOUNCER_URL gives each database: scripts/pgbouncer.sh's
// default_pool_size.
const poolerPoolSize = 40

// Twenty replicas migrating at start-up is ordinary, and a transaction
// pooler has a fixed number of server connections to share among them:
// migrators far outnumbering those connections must all finish, soon. A
// migrator that waited for the lock inside a transaction would hold a
// server connection while it waited, so enough of them would take every
// one, and the holder, needing one more to migrate on, would wait behind
// them until the pooler gave up on it (query_wait_timeout), leaving the
// schema half-migrated.
//
// The test runs in a database of its own, so that the pooler gives it a
// pool of its own (and a stall here cannot stall other tests), and holds
// all but serverConns of that pool's server connections in open
// transactions, as the service's other traffic might.
func TestPgBouncerMigratorsOutnumberingServerConnections(t *testing.T) {
	t.Parallel()
	const (
		migrators   = 50
		serverConns = 20
		within      = 2 * time.Minute
	)
	pooled, direct := bouncerDatabase(t)
	holdServerConnections(t, pooled, poolerPoolSize-serverConns)

	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	errs := make([]error, migrators)
	var finished atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range migrators {
		pool := pooledPool(t, pooled, 4) // each its own, as a replica's
		wg.Go(func() {
			<-start
			errs[i] = migrations.Migrate(ctx, pool, migrations.Options{})
			if errs[i] == nil {
				finished.Add(1)
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(began)
	t.Logf("%d migrators through %d server connections: %d finished in %s", migrators, serverConns, finished.Load(), took.Round(time.Millisecond))
	require.NoError(t, errors.Join(errs...), "%d of %d migrators finished within %s", finished.Load(), migrators, within)

	check := pooledPool(t, direct, 2)
	var applied int
	require.NoError(t, check.QueryRow(context.Background(), ident.Render(
		"SELECT count(*) FROM /* schema */"+pgbox.MigrationsTable+" WHERE version_id > 0", pgbox.DefaultSchema)).Scan(&applied))
	require.Equal(t, pgbox.SchemaVersion, applied, "each migration must be applied exactly once")
	require.NoError(t, pgbox.CheckSchema(context.Background(), check, pgbox.DefaultSchema))
	m, err := migrations.New(check, migrations.Options{})
	require.NoError(t, err)
	defer m.Close()
	have, want, err := m.RiverVersion(context.Background())
	require.NoError(t, err)
	require.Equal(t, want, have, "River's tables must be at the newest version")
	require.Zero(t, advisoryLocksHeld(t, check, pgbox.DefaultSchema), "no server connection may keep the lock")
}

// bouncerDatabase creates a database for the test, dropped when it ends,
// and returns its URL through the PgBouncer at PGBOUNCER_URL (which reaches
// every database of the server) and its direct URL. It skips the test when
// PGBOUNCER_URL is unset. The pooled URL keeps PGBOUNCER_URL's query exec
// mode, cache_describe when it names none.
func bouncerDatabase(t *testing.T) (pooled, direct string) {
	t.Helper()
	raw := os.Getenv("PGBOUNCER_URL")
	if raw == "" {
		t.Skip("PGBOUNCER_URL is unset: start a PgBouncer in transaction pooling mode in front of the test database " +
			"(PGBOUNCER_URL=$(scripts/pgbouncer.sh up \"$DATABASE_URL\")) to run the tests that migrate through it")
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.DirectURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	name := pgtest.EmptySchema(t) // a name no other test holds
	_, err = admin.Exec(ctx, "CREATE DATABASE "+ident.Quote(name))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP DATABASE "+ident.Quote(name)+" WITH (FORCE)")
		require.NoError(t, err)
	})

	u, err := url.Parse(raw)
	require.NoError(t, err, "PGBOUNCER_URL")
	u.Path = "/" + name
	if q := u.Query(); q.Get("default_query_exec_mode") == "" {
		q.Set("default_query_exec_mode", "cache_describe")
		u.RawQuery = q.Encode()
	}
	d, err := url.Parse(pgtest.DirectURL(t))
	require.NoError(t, err)
	d.Path = "/" + name
	return u.String(), d.String()
}

// pooledPool opens a pool of at most maxConns connections on dbURL,
// closed when the test ends. A context that ends mid-query closes the
// connection instead of sending a cancel request, which PgBouncer 1.18
// can crash on (see internal/pgtest).
func pooledPool(t *testing.T, dbURL string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// holdServerConnections keeps n of the pooler's server connections for
// dbURL's database busy until the test ends: each in a transaction left
// open by a client connection of its own.
func holdServerConnections(t *testing.T, dbURL string, n int) {
	t.Helper()
	pool := pooledPool(t, dbURL, int32(n))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			tx, err := pool.Begin(ctx)
			if err == nil {
				_, err = tx.Exec(ctx, "SELECT 1")
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...), fmt.Sprintf(
		"hold %d server connections through PGBOUNCER_URL: the test expects PgBouncer to give each database %d (default_pool_size = %d, as scripts/pgbouncer.sh sets)",
		n, poolerPoolSize, poolerPoolSize))
}
