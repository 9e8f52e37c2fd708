// Package pgtest gives pgbox's tests a real PostgreSQL: a shared pool, a
// freshly migrated schema per test, and child processes to kill.
//
// The database comes from DATABASE_URL or, when that is unset, from the
// throwaway cluster that `make pg-up` (scripts/pg.sh) runs. There is no
// fallback and no skipping: a test run without a database fails and says how
// to get one.
//
// Per-test schemas come from pgboxtest, the test kit pgbox offers its
// users, on the shared pool: pgbox's own tests use what users get, and the
// naming and cleanup logic lives in one place.
package pgtest

import (
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pgbox/pgbox/pgboxtest"
)

// DirectURL returns a connection string that reaches the test database
// without a connection pooler in between: PGBOX_DIRECT_URL, which `make
// test` sets when it runs a package's tests through PgBouncer, or else
// URL. LISTEN needs it, since a transaction-pooling PgBouncer delivers no
// notifications.
func DirectURL(tb testing.TB) string {
	tb.Helper()
	if u := os.Getenv("PGBOX_DIRECT_URL"); u != "" {
		return u
	}
	return URL(tb)
}

// ThroughPooler reports whether the tests run through a connection pooler
// (PGBOX_DIRECT_URL is set): a LISTEN on the pool's connections then
// leaves no trace a test can find in pg_stat_activity.
func ThroughPooler() bool { return os.Getenv("PGBOX_DIRECT_URL") != "" }

// ListenConnConfig is what a dispatcher or relay under test should LISTEN
// on (their Config.ListenConnConfig): DirectURL's configuration when the
// tests run through a pooler (PGBOX_DIRECT_URL is set), or nil, the
// pool's own, on a direct connection.
func ListenConnConfig(tb testing.TB) *pgx.ConnConfig {
	tb.Helper()
	if !ThroughPooler() {
		return nil
	}
	cfg, err := pgx.ParseConfig(os.Getenv("PGBOX_DIRECT_URL"))
	if err != nil {
		tb.Fatalf("pgtest: PGBOX_DIRECT_URL: %v", err)
	}
	return cfg
}

// Listen returns a connection of its own, on DirectURL, that listens on
// channel; it is closed when the test ends.
func Listen(tb testing.TB, channel string) *pgx.Conn {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, DirectURL(tb))
	if err != nil {
		tb.Fatalf("pgtest: connect to listen on %s: %v", channel, err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: listen on %s: %v", channel, err)
	}
	return conn
}

// URL returns the connection string of the test database.
func URL(tb testing.TB) string {
	tb.Helper()
	u, err := url()
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

func url() (string, error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("pgtest: go.mod not found above the working directory")
		}
		dir = parent
	}
	port, err := os.ReadFile(filepath.Join(dir, ".pgbox", "pg", "port"))
	if err != nil {
		return "", fmt.Errorf("pgtest: no database: set DATABASE_URL, or run `make pg-up` to start the local test cluster (%v)", err)
	}
	return "postgres://postgres@127.0.0.1:" + strings.TrimSpace(string(port)) + "/pgbox?sslmode=disable", nil
}

var (
	sharedOnce sync.Once
	shared     *pgxpool.Pool
	sharedErr  error
)

// Pool returns the package's shared pool. Its search_path is empty (see
// checkSearchPath), so a query that forgets to name its schema fails instead
// of finding a table by luck. Main closes it.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	sharedOnce.Do(func() {
		shared, sharedErr = newPool(context.Background(), 20, nil)
	})
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

// NewPool returns a pool of its own for one test, with at most maxConns
// connections, closed when the test ends. Use it when a test needs
// connections nobody else takes (many concurrent sessions, a dispatcher
// whose connections a test will cut).
func NewPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	pool, err := newPool(context.Background(), maxConns, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// UntypedModes are the pgx query exec modes that send parameters without
// their types: pgx encodes each value as text by its Go type alone, and the
// server infers the type from the statement. They are the modes that
// refuse a value pgx can encode only for a known type, such as a
// []uuid.UUID, or a []byte meant for jsonb (sent as bytea). The other
// modes describe every statement first. Users pick one with
// default_query_exec_mode in the connection string, as behind PgBouncer.
var UntypedModes = []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}

// NewPoolMode is NewPool, its connections sending every statement in query
// exec mode mode, whatever DATABASE_URL says. Tests use it to show that a
// statement works in each of UntypedModes even when the suite runs in the
// default mode.
func NewPoolMode(tb testing.TB, mode pgx.QueryExecMode, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	return NewPoolWith(tb, maxConns, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DefaultQueryExecMode = mode
	})
}

// NewPoolWith is NewPool with configure adjusting the pool's
// configuration first: a test that breaks connections gives it a
// DialFunc of its own, say.
func NewPoolWith(tb testing.TB, maxConns int32, configure func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	pool, err := newPool(context.Background(), maxConns, configure)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// ListensThroughPooler skips a test that LISTENs through PgBouncer
// unless it runs in make test's pass through the pooler (PGBOX_DIRECT_URL
// set), so that it runs once per make test rather than in every pass.
// Such a LISTEN stays on a server connection the pooler hands to others,
// and PgBouncer 1.18 (Debian's) warns of each notification that reaches
// it unlinked; in one clean-clone CI run it then died ("server_proto:
// server in bad state") as a cancel request met that connection, and
// every later test through it failed.
func ListensThroughPooler(tb testing.TB) {
	tb.Helper()
	if !ThroughPooler() {
		tb.Skip("listens through PgBouncer: runs in make test's pass through the pooler only (PGBOX_DIRECT_URL set)")
	}
}

// BouncerPool returns a pool of its own through the transaction-pooling
// PgBouncer at PGBOUNCER_URL, in front of the test database, with at most
// maxConns connections, closed when the test ends. Its connections use
// pgx's cache_describe mode, the one docs/operations.md advises behind a
// transaction pooler, unless the URL names another. It skips the test
// when PGBOUNCER_URL is unset, and fails it when the pooler leads to
// another database than the test's.
func BouncerPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	raw := os.Getenv("PGBOUNCER_URL")
	if raw == "" {
		tb.Skip("PGBOUNCER_URL is unset: start a PgBouncer in transaction pooling mode in front of the test database " +
			"(PGBOUNCER_URL=$(scripts/pgbouncer.sh up \"$DATABASE_URL\")) to run the tests that go through it")
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		tb.Fatalf("pgtest: PGBOUNCER_URL: %v", err)
	}
	if q := u.Query(); q.Get("default_query_exec_mode") == "" {
		q.Set("default_query_exec_mode", "cache_describe")
		u.RawQuery = q.Encode()
	}
	ctx := context.Background()
	pool, err := newPoolOn(ctx, u.String(), true, maxConns, nil)
	if err != nil {
		tb.Fatalf("PGBOUNCER_URL: %v", err)
	}
	tb.Cleanup(pool.Close)

	// Tests check through the test database's pool what happened through
	// the pooler: both must reach the same database.
	const whoSQL = "SELECT pg_catalog.current_database(), pg_catalog.inet_server_port()"
	var viaPooler, direct struct {
		database string
		port     int32
	}
	if err := pool.QueryRow(ctx, whoSQL).Scan(&viaPooler.database, &viaPooler.port); err != nil {
		tb.Fatalf("pgtest: through PGBOUNCER_URL: %v", err)
	}
	if err := Pool(tb).QueryRow(ctx, whoSQL).Scan(&direct.database, &direct.port); err != nil {
		tb.Fatal(err)
	}
	if viaPooler != direct {
		tb.Fatalf("pgtest: PGBOUNCER_URL leads to database %s on port %d, the test database is %s on port %d: point the pooler at the test database",
			viaPooler.database, viaPooler.port, direct.database, direct.port)
	}
	return pool
}

// newPool opens a pool on the test database; configure, if set, adjusts
// its configuration first.
func newPool(ctx context.Context, maxConns int32, configure func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	u, err := url()
	if err != nil {
		return nil, err
	}
	return newPoolOn(ctx, u, ThroughPooler(), maxConns, configure)
}

// newPoolOn opens a pool on the database at u, through a transaction
// pooler when pooled; configure, if set, adjusts its configuration first.
func newPoolOn(ctx context.Context, u string, pooled bool, maxConns int32, configure func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, fmt.Errorf("pgtest: parse database URL: %w", err)
	}
	cfg.MaxConns = maxConns
	if pooled {
		// Debian 12's PgBouncer 1.18 can crash ("disconnect_client(): bad
		// client state: 0", pgbouncer/pgbouncer#801, fixed in 1.19.1 and
		// later) when a client closes a cancel request's connection
		// before the pooler has forwarded it, which pgx does when a
		// context ends mid-query under load. Through the pooler, the tests'
		// pools end such a query by a deadline on the connection instead,
		// as docs/operations.md advises users of 1.18.
		cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
		}
	}
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgtest: database unreachable: %w (is the test cluster up? run `make pg-up`)", err)
	}
	if err := checkSearchPath(pingCtx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// checkSearchPath fails unless the test database gives its sessions an
// empty search_path.
//
// The tests connect without startup parameters, as pgbox does, because
// PgBouncer in transaction pooling mode refuses them (and a SET after
// connecting would be session state that a pooler hands to other clients).
// So the empty search_path has to be the database's own default: `ALTER
// DATABASE … SET search_path = ”`, which scripts/pg.sh applies to its
// cluster. pgtest does not alter a database named by DATABASE_URL itself,
// which may not be a throwaway one; it checks, once per pool, and says what
// to run. current_schemas(false) is what the check is about: the schemas
// where an unqualified name would be found.
func checkSearchPath(ctx context.Context, pool *pgxpool.Pool) error {
	var (
		database string
		schemas  []string
	)
	err := pool.QueryRow(ctx, "SELECT pg_catalog.current_database(), pg_catalog.current_schemas(false)").Scan(&database, &schemas)
	if err != nil {
		return fmt.Errorf("pgtest: read the test database's search_path: %w", err)
	}
	if len(schemas) > 0 {
		return fmt.Errorf("pgtest: unqualified names resolve in the test database (its search_path puts %s on it); "+
			"pgbox's tests need an empty search_path, so that a query that forgets its schema fails instead of finding a table by luck: "+
			"run ALTER DATABASE %s SET search_path = '' (scripts/pg.sh up does this for its own cluster), then run the tests again",
			strings.Join(schemas, ", "), pgx.Identifier{database}.Sanitize())
	}
	return nil
}

// Schema creates a schema of the test's own, migrated to the current
// version, and drops it when the test ends: pgboxtest.Schema on the shared
// pool. Its name starts with the test's name, so a leftover one tells whose
// it was.
func Schema(tb testing.TB) string {
	tb.Helper()
	return pgboxtest.Schema(tb, Pool(tb))
}

// EmptySchema returns a fresh schema name for the test, dropped (with
// whatever was created in it) when the test ends. The schema itself is not
// created.
func EmptySchema(tb testing.TB) string {
	tb.Helper()
	return pgboxtest.EmptySchema(tb, Pool(tb))
}

// PubSubGoroutines are the Google Cloud Pub/Sub client's goroutines that
// outlive the tests, for Main's leaks in the packages that use it:
// OpenCensus's worker, started by its package's init, and each ended
// subscription's stream keep-alive, which sees that its subscription ended
// only at its next ping tick.
var PubSubGoroutines = []goleak.Option{
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
}

// Main runs a package's tests, then closes the shared pool and fails the run
// if any goroutine outlived its test, apart from those leaks describes (a
// library's goroutines that outlive it by design). Call it from TestMain.
//
// Before the tests it sets DATABASE_URL, when unset, to the local test
// cluster's URL, so that runnable Examples, which open their database as a
// user's program would (pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"),
// …)), find the same database as the tests.
func Main(m *testing.M, leaks ...goleak.Option) { os.Exit(Run(m, leaks...)) }

// Run is Main without the exit: it returns the exit code, for a TestMain
// with more to do once the tests have run (stop a broker it started).
func Run(m *testing.M, leaks ...goleak.Option) int {
	if os.Getenv("DATABASE_URL") == "" {
		if u, err := url(); err == nil {
			os.Setenv("DATABASE_URL", u)
		}
	}
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	if code == 0 && !IsChild() {
		if err := goleak.Find(leaks...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	return code
}
