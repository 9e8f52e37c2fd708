package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// tableIn reports whether schema holds a table named table.
func tableIn(t *testing.T, pool *pgxpool.Pool, schema, table string) bool {
	t.Helper()
	var exists bool
	err := pool.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2)", schema, table).Scan(&exists)
	require.NoError(t, err)
	return exists
}

func schemaExists(t *testing.T, pool *pgxpool.Pool, schema string) bool {
	t.Helper()
	var exists bool
	err := pool.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists)
	require.NoError(t, err)
	return exists
}

func TestMigrateCreatesSchemaAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)

	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()

	applied, err := m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, applied, pgbox.SchemaVersion)
	require.Equal(t, "00001_inbox.sql", applied[0].Name)
	require.True(t, tableIn(t, pool, schema, "inbox"))
	require.True(t, tableIn(t, pool, schema, pgbox.MigrationsTable))
	require.False(t, tableIn(t, pool, "public", "inbox"), "nothing may land in public")

	again, err := m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, again, "a second Up must apply nothing")

	v, err := m.Version(ctx)
	require.NoError(t, err)
	require.EqualValues(t, pgbox.SchemaVersion, v)
	require.NoError(t, pgbox.CheckSchema(ctx, pool, schema))
}

func TestEmbeddedMigrationsMatchSchemaVersion(t *testing.T) {
	t.Parallel()
	m, err := migrations.New(pgtest.Pool(t), migrations.Options{Schema: "unused"})
	require.NoError(t, err)
	defer m.Close()

	st, err := m.Status(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, st)
	require.EqualValues(t, pgbox.SchemaVersion, st[len(st)-1].Version,
		"pgbox.SchemaVersion must name the newest embedded migration")
	for i, s := range st {
		require.EqualValues(t, i+1, s.Version, "migrations are numbered 1, 2, 3 … without gaps")
	}
}

func TestMigrateQuotesOddSchemaNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)

	for _, odd := range []string{`We"ird; DROP TABLE inbox --`, "Mixed Case", "café"} {
		// Leave room for EmptySchema's cleanup-registered prefix while keeping the odd part.
		schema := pgtest.EmptySchema(t) + odd
		if len(schema) > 63 {
			schema = schema[len(schema)-63:]
		}
		t.Cleanup(func() { _, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident.Quote(schema)+" CASCADE") })

		require.NoError(t, migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}), schema)
		require.True(t, tableIn(t, pool, schema, "inbox"), "inbox must be created in exactly %q", schema)
		require.NoError(t, pgbox.CheckSchema(ctx, pool, schema))
		require.NoError(t, pgbox.CheckPartitioning(ctx, pool, schema))
	}
}

func TestMigrateRejectsBadSchemaNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)

	for name, want := range map[string]string{
		strings.Repeat("x", 64): "is 64 bytes, over the 63-byte limit",
		"nul\x00byte":           "contains a NUL character",
	} {
		err := migrations.Migrate(ctx, pool, migrations.Options{Schema: name})
		require.ErrorContains(t, err, want)
		require.False(t, schemaExists(t, pool, strings.ReplaceAll(name, "\x00", "")), "a rejected name must create nothing")
	}
}

func TestConcurrentMigratorsAreSerialized(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.EmptySchema(t)

	// Each migrator has its own pool, so each holds its own sessions, as
	// separate processes starting at once would.
	const migrators = 8
	errs := make([]error, migrators)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range migrators {
		pool := pgtest.NewPool(t, 2)
		wg.Go(func() {
			<-start
			errs[i] = migrations.Migrate(ctx, pool, migrations.Options{Schema: schema})
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))

	var applied int
	err := pgtest.Pool(t).QueryRow(ctx, ident.Render(
		"SELECT count(*) FROM /* schema */"+pgbox.MigrationsTable+" WHERE version_id > 0", schema)).Scan(&applied)
	require.NoError(t, err)
	require.Equal(t, pgbox.SchemaVersion, applied, "each migration must be applied exactly once")

	m, err := migrations.New(pgtest.Pool(t), migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()
	_, want, err := m.RiverVersion(ctx)
	require.NoError(t, err)
	var riverApplied int
	err = pgtest.Pool(t).QueryRow(ctx, ident.Render("SELECT count(*) FROM /* schema */river_migration", schema)).Scan(&riverApplied)
	require.NoError(t, err)
	require.Equal(t, want, riverApplied, "each of River's migrations must be applied exactly once")
}

func TestCheckSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)

	t.Run("Missing", func(t *testing.T) {
		t.Parallel()
		schema := pgtest.EmptySchema(t)
		err := pgbox.CheckSchema(ctx, pool, schema)
		require.ErrorIs(t, err, pgbox.ErrSchemaNotMigrated)
		require.ErrorContains(t, err, "schema "+schema+" has no pgbox tables: run inboxctl migrate up")
	})

	t.Run("Behind", func(t *testing.T) {
		t.Parallel()
		schema := pgtest.Schema(t)
		m, err := migrations.New(pool, migrations.Options{Schema: schema})
		require.NoError(t, err)
		defer m.Close()
		_, err = m.DownTo(ctx, pgbox.SchemaVersion-1)
		require.NoError(t, err)

		err = pgbox.CheckSchema(ctx, pool, schema)
		require.ErrorIs(t, err, pgbox.ErrSchemaNotMigrated)
		if pgbox.SchemaVersion == 1 {
			require.ErrorContains(t, err, "schema "+schema+" has no pgbox migrations applied: run inboxctl migrate up")
		} else {
			require.EqualError(t, err, fmt.Sprintf("schema %s is at version %d, this build needs %d: run inboxctl migrate up",
				schema, pgbox.SchemaVersion-1, pgbox.SchemaVersion))
		}
	})

	t.Run("Ahead", func(t *testing.T) {
		t.Parallel()
		schema := pgtest.Schema(t)
		_, err := pool.Exec(ctx, ident.Render("INSERT INTO /* schema */"+pgbox.MigrationsTable+" (version_id, is_applied) VALUES ($1, true)", schema),
			pgbox.SchemaVersion+1)
		require.NoError(t, err)

		err = pgbox.CheckSchema(ctx, pool, schema)
		var verr *pgbox.SchemaVersionError
		require.ErrorAs(t, err, &verr)
		require.EqualValues(t, pgbox.SchemaVersion+1, verr.Have)
		require.NotErrorIs(t, err, pgbox.ErrSchemaNotMigrated, "a newer schema is not an unmigrated one")
		require.ErrorContains(t, err, "newer than this build")
	})

	t.Run("LostPartitioningRow", func(t *testing.T) {
		t.Parallel()
		schema := pgtest.Schema(t)
		_, err := pool.Exec(ctx, ident.Render("DELETE FROM /* schema */partitioning WHERE table_name = 'inbox'", schema))
		require.NoError(t, err)

		require.NoError(t, pgbox.CheckSchema(ctx, pool, schema), "the version is right: inboxctl and the dispatcher still work")
		err = pgbox.CheckPartitioning(ctx, pool, schema)
		require.ErrorIs(t, err, pgbox.ErrSchemaDamaged)
		require.NotErrorIs(t, err, pgbox.ErrSchemaNotMigrated, "migrating again would not bring the row back")
		require.ErrorContains(t, err, schema+".partitioning has no row for the inbox (no message can be received);")
		require.ErrorContains(t, err, "restore it from a backup of the schema")

		_, err = pool.Exec(ctx, ident.Render("DELETE FROM /* schema */partitioning WHERE table_name = 'outbox'", schema))
		require.NoError(t, err)
		require.ErrorContains(t, pgbox.CheckPartitioning(ctx, pool, schema),
			"no row for the inbox (no message can be received) and no row for the outbox (the maintenance job")
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/pgbox?sslmode=disable&connect_timeout=2")
		require.NoError(t, err)
		dead, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer dead.Close()

		err = pgbox.CheckSchema(ctx, dead, "pgbox")
		require.Error(t, err)
		require.NotErrorIs(t, err, pgbox.ErrSchemaNotMigrated, "an unreachable server must not be mistaken for an empty schema")
		require.ErrorContains(t, err, "check schema pgbox")
	})
}

func TestDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)

	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()

	down, err := m.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, down, pgbox.SchemaVersion)
	require.False(t, tableIn(t, pool, schema, "inbox"))

	_, err = m.Down(ctx)
	require.ErrorContains(t, err, "has no applied migration to roll back")

	st, err := m.Status(ctx)
	require.NoError(t, err)
	for _, s := range st {
		require.False(t, s.Applied, s.Name)
	}

	_, err = m.Up(ctx)
	require.NoError(t, err)
	require.True(t, tableIn(t, pool, schema, "inbox"))

	_, err = m.DownTo(ctx, pgbox.SchemaVersion+1)
	require.ErrorContains(t, err, "out of range")
}

func TestStatusAndVersionChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)

	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()

	v, err := m.Version(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st, pgbox.SchemaVersion)
	require.False(t, st[0].Applied)
	require.False(t, schemaExists(t, pool, schema), "status must not create the schema")
}

// The embedded files must all be goose SQL migrations with both directions,
// so `inboxctl migrate down` can always undo what up did.
func TestEveryMigrationHasDown(t *testing.T) {
	t.Parallel()
	err := fs.WalkDir(migrations.Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(migrations.Files(), path)
		require.NoError(t, err)
		require.Contains(t, string(body), "-- +goose Up", path)
		require.Contains(t, string(body), "-- +goose Down", path)
		return nil
	})
	require.NoError(t, err)
}

// riverTables lists River's tables in schema.
func riverTables(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		"SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename LIKE 'river%' ORDER BY 1", schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// River's tables come with migration 4, in pgbox's schema, and go when the
// schema is rolled back below it; the rest of the schema is untouched.
func TestRiverTablesFollowMigrationFour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)

	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()

	have, want, err := m.RiverVersion(ctx)
	require.NoError(t, err)
	require.Positive(t, want)
	require.Equal(t, want, have, "Up applies every River migration this build carries")
	require.Subset(t, riverTables(t, pool, schema), []string{"river_job", "river_leader", "river_migration", "river_queue"})
	require.Empty(t, riverTables(t, pool, "public"), "River's tables must land in pgbox's schema")
	require.True(t, tableIn(t, pool, schema, "scheduled_replays"))

	down, err := m.DownTo(ctx, migrations.RiverSince-1)
	require.NoError(t, err)
	require.Len(t, down, pgbox.SchemaVersion-migrations.RiverSince+1, "River's migrations are not pgbox's results")
	require.Empty(t, riverTables(t, pool, schema))
	require.False(t, tableIn(t, pool, schema, "scheduled_replays"))
	require.True(t, tableIn(t, pool, schema, "inbox"), "the rest of the schema stays")
	have, _, err = m.RiverVersion(ctx)
	require.NoError(t, err)
	require.Zero(t, have)

	_, err = m.Up(ctx)
	require.NoError(t, err)
	have, _, err = m.RiverVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, want, have)

	// Down one step from 4 takes River's tables too.
	res, err := m.Down(ctx)
	require.NoError(t, err)
	require.EqualValues(t, pgbox.SchemaVersion, res.Version)
	if pgbox.SchemaVersion == migrations.RiverSince {
		require.Empty(t, riverTables(t, pool, schema))
	}
}

// A schema never migrated has no River version, and asking creates nothing.
func TestRiverVersionOfAnEmptySchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)
	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()
	have, want, err := m.RiverVersion(context.Background())
	require.NoError(t, err)
	require.Zero(t, have)
	require.Positive(t, want)
	require.False(t, schemaExists(t, pool, schema))
}
