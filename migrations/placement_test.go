package migrations_test

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/migrations"
)

// tablesIn lists the tables of schema, partitions left out.
func tablesIn(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1`, schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// advisoryLocksHeld counts the sessions holding schema's migration lock in
// the current database.
func advisoryLocksHeld(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	return advisoryLocks(t, pool, schema, true)
}

// advisoryWaiters counts the sessions waiting for schema's migration lock.
func advisoryWaiters(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	return advisoryLocks(t, pool, schema, false)
}

func advisoryLocks(t *testing.T, pool *pgxpool.Pool, schema string, granted bool) int {
	t.Helper()
	key := uint64(migrations.LockID(schema))
	var n int
	err := pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_catalog.pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1
		  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
		  AND classid::bigint = $1 AND objid::bigint = $2 AND granted = $3`,
		int64(key>>32), int64(key&0xffffffff), granted).Scan(&n)
	require.NoError(t, err)
	return n
}

// Up checks that every table it expects is in the schema; the list it
// checks must be every table the migrations create.
func TestTablesListsEveryTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)

	var ours []string
	for _, table := range tablesIn(t, pool, schema) {
		if table != pgbox.MigrationsTable && !strings.HasPrefix(table, "river_") {
			ours = append(ours, table)
		}
	}
	require.ElementsMatch(t, ours, migrations.PGBoxTables)
}

// A session whose search_path points elsewhere (a role's or database's
// default, a SET by a pooler's previous client) cannot move the tables:
// each migration sets the schema in its own transaction.
func TestMigrateIgnoresTheSessionsSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.EmptySchema(t)
	decoy := pgtest.EmptySchema(t)
	_, err := pgtest.Pool(t).Exec(ctx, "CREATE SCHEMA "+ident.Quote(decoy))
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SET search_path TO "+ident.Quote(decoy))
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	require.NoError(t, migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}))
	require.Empty(t, tablesIn(t, pgtest.Pool(t), decoy), "nothing may land in the session's search_path")
	require.Subset(t, tablesIn(t, pgtest.Pool(t), schema), append([]string{pgbox.MigrationsTable, "river_job"}, migrations.PGBoxTables...))
	require.NoError(t, pgbox.CheckSchema(ctx, pool, schema))
}

// When the version table says the schema is migrated but pgbox's tables
// are somewhere else (as an older migrator whose search_path a pooler
// dropped could leave it), Up fails and says what is where.
func TestMigrateFailsWhenTablesAreInAnotherSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	elsewhere := pgtest.Schema(t)
	schema := pgtest.EmptySchema(t)
	_, err := pool.Exec(ctx, "CREATE SCHEMA "+ident.Quote(schema))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ident.Render("ALTER TABLE /* schema */"+pgbox.MigrationsTable+" SET SCHEMA "+ident.Quote(schema), elsewhere))
	require.NoError(t, err)

	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()
	applied, err := m.Up(ctx)
	require.Empty(t, applied, "the version table claims every migration")
	require.ErrorContains(t, err, "migrations: schema "+schema+" is incomplete after migrating: ")
	// Schemas without a version table of their own come first: the likely
	// places for misplaced tables, before other pgbox schemas.
	require.Regexp(t, `inbox is missing \(found in schemas? "`+regexp.QuoteMeta(elsewhere)+`"`, err.Error())
	require.ErrorContains(t, err, "move them into")
	require.NotContains(t, err.Error(), pgbox.MigrationsTable+" is missing", "the version table is where it belongs")
}

// Up fails, naming the table, when one the version table claims is gone.
func TestMigrateFailsWhenATableIsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := pool.Exec(ctx, ident.Render("DROP TABLE /* schema */scheduled_replays", schema))
	require.NoError(t, err)

	err = migrations.Migrate(ctx, pool, migrations.Options{Schema: schema})
	require.ErrorContains(t, err, "is incomplete after migrating: scheduled_replays is missing")
}

// The lock lives and dies with a transaction: nothing holds it once Up
// returns, whether Up succeeded or failed.
func TestMigrateLeavesNoLockBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)

	require.NoError(t, migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}))
	require.Zero(t, advisoryLocksHeld(t, pool, schema))

	_, err := pool.Exec(ctx, ident.Render("DROP TABLE /* schema */inbox_claims", schema))
	require.NoError(t, err)
	require.Error(t, migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}))
	require.Zero(t, advisoryLocksHeld(t, pool, schema))
}

// A migrator waiting for the lock says so, waits outside any transaction
// (no server session waits in the lock's queue for it), and gives up when
// its context ends.
func TestMigrateWaitsForTheLockUntilCanceled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrations.LockID(schema))
	require.NoError(t, err)

	logs := &logtest.Recorder{}
	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- migrations.Migrate(waitCtx, pool, migrations.Options{Logger: slog.New(logs), Schema: schema})
	}()
	require.Eventually(t, func() bool { return logs.Count(slog.LevelInfo, "another migrator holds the migration lock") == 1 },
		10*time.Second, 10*time.Millisecond)
	require.Zero(t, advisoryWaiters(t, pool, schema), "a waiting migrator must not wait in a transaction")
	cancel()
	require.ErrorContains(t, <-done, "wait for the migration lock")
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "another migrator holds the migration lock"), "said once, not per try")
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, tablesIn(t, pool, schema), "nothing ran without the lock")
}

// The lock's transaction sits idle while the migrations run. A session
// that ends idle transactions (idle_in_transaction_session_timeout, here a
// startup parameter, as a role's or database's default could set it) must
// not end that one: the lock would go with it, and another migrator could
// run at the same time.
func TestMigrateLockOutlivesIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	const idleTimeout = time.Second

	cfg, err := pgxpool.ParseConfig(pgtest.DirectURL(t)) // startup parameters do not pass a pooler
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = idleTimeout.String()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()
	_, err = m.DownTo(ctx, pgbox.SchemaVersion-1)
	require.NoError(t, err)

	// Up waits, holding the lock, until the test lets it record the
	// migration it applies (from a session without the idle timeout).
	block, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer block.Rollback(ctx) //nolint:errcheck
	_, err = block.Exec(ctx, ident.Render("LOCK TABLE /* schema */"+pgbox.MigrationsTable+" IN EXCLUSIVE MODE", schema))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := m.Up(ctx)
		done <- err
	}()
	key := uint64(migrations.LockID(schema))
	var holder int32
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_catalog.pg_locks
			WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND classid::bigint = $1 AND objid::bigint = $2`,
			int64(key>>32), int64(key&0xffffffff)).Scan(&holder)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	// Until the lock's session has sat idle for twice the timeout, or is
	// gone.
	require.Eventually(t, func() bool {
		var waited bool
		err := pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity
			WHERE pid = $1 AND NOT (state = 'idle in transaction' AND state_change < now() - $2::interval))`,
			holder, (2 * idleTimeout).String()).Scan(&waited)
		return err == nil && waited
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, block.Rollback(ctx))
	require.NoError(t, <-done, "the lock's transaction must outlive the session's idle timeout")
	v, err := m.Version(ctx)
	require.NoError(t, err)
	require.EqualValues(t, pgbox.SchemaVersion, v)
}

func TestParseMigration(t *testing.T) {
	t.Parallel()

	up, down, err := migrations.ParseMigration("00007_x.sql", "-- header\n-- +goose Up\nCREATE TABLE x ();\n-- +goose StatementBegin\nSELECT 1;\n-- +goose StatementEnd\n-- +goose Down\nDROP TABLE x;\n")
	require.NoError(t, err)
	require.Equal(t, "CREATE TABLE x ();\nSELECT 1;\n", up)
	require.Equal(t, "DROP TABLE x;\n", down)

	for body, want := range map[string]string{
		"-- +goose Up\nSELECT 1;\n":                                `needs both "-- +goose Up" and "-- +goose Down" sections`,
		"-- +goose Down\nSELECT 1;\n-- +goose Up\n":                `"-- +goose Down" must come once, after "-- +goose Up"`,
		"-- +goose NO TRANSACTION\n-- +goose Up\n-- +goose Down\n": `annotation "-- +goose NO TRANSACTION" is not supported`,
		"-- +goose Up\n-- +goose Down\n-- +goose Up\n":             `"-- +goose Up" must come once, before "-- +goose Down"`,
	} {
		_, _, err := migrations.ParseMigration("00007_x.sql", body)
		require.ErrorContains(t, err, want, body)
	}
}
