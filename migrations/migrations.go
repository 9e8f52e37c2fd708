// Package migrations creates and upgrades pgbox's tables.
//
// The SQL lives in numbered goose files embedded in the binary, so a service
// and its inboxctl always carry the schema they were built for. Everything
// lands in one PostgreSQL schema (default "pgbox"), created on first use.
// Migrators in several processes may start at once: a PostgreSQL advisory
// lock, one per schema, lets one run at a time, and the others then find
// nothing left to do. A migrator waiting for the lock holds no server
// connection while it waits: it asks for the lock again every second or
// less, each time in a short transaction of its own. So any number of
// replicas migrating at start-up through a transaction pooler all finish,
// as long as its pool has two server connections, which the one migrating
// needs at a time.
//
// The migrator keeps no session state, so it works through PgBouncer in
// transaction pooling mode as well as on a direct connection: it sends no
// startup parameter; each migration's own transaction points search_path
// at the schema (set_config(…, true), which ends with the transaction);
// goose's version table is always named with its schema; and the lock is
// a transaction-level advisory lock (pg_try_advisory_xact_lock), held by a
// transaction that stays open on a connection of its own for the whole run,
// so the server releases it at commit, rollback or disconnection and never
// on the wrong connection. Through PgBouncer, give the pool's URL
// default_query_exec_mode=cache_describe, as for the rest of pgbox
// (docs/operations.md, "Deployment shapes"): pgx's default mode prepares
// named statements, which the next transaction's server connection does
// not have. After Up, the migrator checks that every table
// landed in the schema and fails, naming what it found where, if not.
//
// Migration 4 also installs River's tables (river_job, river_leader, …) in
// the same schema, with River's own migrator (rivermigrate): package
// maintenance runs pgbox's background jobs on River, with River's leader
// election. They are applied right after pgbox's migrations, under the same
// lock, and removed when the schema is rolled back below version 4. Give
// pgbox a schema of its own (the default, "pgbox"): River's tables in it
// belong to pgbox's maintenance, and a River of the service's own that
// shared them would compete with it for leadership.
//
// Most services call Migrate once at start-up; operators use
// `inboxctl migrate`, which drives a Migrator.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/backoff"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/partition"
)

//go:embed sql/*.sql
var embedded embed.FS

// Options configures a Migrator.
type Options struct {
	// Logger receives a line per migration applied or rolled back, and
	// one at info when another migrator holds the schema's lock and this
	// one waits for it. Defaults to discarding them.
	Logger *slog.Logger

	// Schema is the PostgreSQL schema that holds pgbox's tables. It is
	// created if it does not exist. Defaults to pgbox.DefaultSchema.
	Schema string
}

// Result describes one migration that was applied or rolled back.
type Result struct {
	// Direction is "up" or "down".
	Direction string
	// Duration is how long the migration took.
	Duration time.Duration
	// Name is the migration's file name, such as "00001_inbox.sql".
	Name string
	// Version is the migration's number.
	Version int64
}

// Status describes one migration known to this build.
type Status struct {
	// Applied reports whether the migration has been applied to the schema.
	Applied bool
	// AppliedAt is when it was applied; zero if it has not been.
	AppliedAt time.Time
	// Name is the migration's file name.
	Name string
	// Version is the migration's number.
	Version int64
}

// RiverSince is the pgbox migration from which River's tables are part of
// the schema: Up installs them once the schema reaches it, and rolling back
// below it removes them.
const RiverSince = 4

// Migrator applies and rolls back pgbox's migrations in one schema.
// Close it when done.
type Migrator struct {
	db       *sql.DB // goose's connections: one holds the migration lock, goose migrates on the other
	lockID   int64
	logger   *slog.Logger
	names    map[int64]string // migration file names by version
	pool     *pgxpool.Pool
	provider *goose.Provider
	river    *rivermigrate.Migrator[pgx.Tx]
	schema   string
}

// New returns a Migrator for the schema named in opts, connecting the way
// pool does. It does not touch the database.
func New(pool *pgxpool.Pool, opts Options) (*Migrator, error) {
	if pool == nil {
		return nil, errors.New("migrations: pool is nil")
	}
	schema := opts.Schema
	if schema == "" {
		schema = pgbox.DefaultSchema
	}
	if err := ident.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	files, err := readMigrations(Files())
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err) // a broken build, caught by the package's tests
	}
	names := make(map[int64]string, len(files))
	for _, f := range files {
		names[f.version] = f.name
	}

	// goose's connections are configured exactly as the pool's: no startup
	// parameter of ours, so a transaction-pooling PgBouncer accepts them.
	// The schema reaches the SQL through each migration's transaction (see
	// goMigrations) and goose's version table through versionStore.
	db := stdlib.OpenDB(*pool.Config().ConnConfig.Copy())
	db.SetMaxOpenConns(2)

	// The embedded files run as Go migrations (fsys nil), so that each can
	// set the schema in its own transaction before its SQL. No goose
	// locker: the Migrator takes the lock itself, so that River's
	// migrations run under it too (see locked).
	provider, err := goose.NewProvider(goose.DialectCustom, db, nil,
		goose.WithDisableGlobalRegistry(true),
		goose.WithGoMigrations(goMigrations(files, schema)...),
		goose.WithSlog(logger),
		goose.WithStore(newVersionStore(schema)),
	)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("migrations: %w", err), db.Close())
	}

	// River's migrator uses the caller's pool: no connection of that pool is
	// held while waiting for the lock (that is one of goose's), so migrators
	// queueing on the lock cannot starve the one holding it. River names
	// its schema in every statement.
	river, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger, Schema: schema})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("migrations: river: %w", err), provider.Close())
	}
	return &Migrator{db: db, lockID: lockID(schema), logger: logger, names: names, pool: pool, provider: provider, river: river, schema: schema}, nil
}

// Close releases the Migrator's connections.
func (m *Migrator) Close() error {
	return m.provider.Close()
}

// locked runs fn holding the schema's migration lock.
//
// The lock is a transaction-level advisory lock taken in a transaction
// opened for it on one of goose's two connections (goose migrates on the
// other, River on the caller's pool) and kept open, idle, until fn returns.
// A session-level lock would not survive a pooler: PgBouncer in
// transaction mode runs the lock and the unlock on whichever server
// connections are free, so the unlock fails and the lock stays with a
// connection other clients then use. A transaction pins its server
// connection until it ends, and the server releases the lock when it ends,
// however it ends (rollback, a dropped client, a killed backend).
//
// A migrator that finds the lock taken does not wait for it in the server
// (pg_advisory_xact_lock): a transaction waiting there would pin a server
// connection for the whole wait, and behind a transaction pooler enough
// waiting migrators take every server connection of the pool while the
// holder needs one more to migrate on, so none finishes. Instead it asks
// with pg_try_advisory_xact_lock in a short transaction, ends the
// transaction when the answer is no, and asks again after a pause (see
// lockPollFirst): between tries it holds no server connection. The holder
// needs two at a time, its lock's and one to migrate on. Polling costs the
// next migrator up to lockPollMax of latency; there is no stale lock to
// expire, as with goose's table-based locker, since the server releases
// the lock with its transaction.
//
// idle_in_transaction_session_timeout is switched off for the lock's
// transaction alone, since that transaction sits idle while the migrations
// run; PgBouncer's idle_transaction_timeout (off by default) must exceed
// the migrations' duration for the same reason.
func (m *Migrator) locked(ctx context.Context, fn func() error) error {
	tx, err := m.lock(ctx)
	if err != nil {
		return err
	}
	fnErr := fn()
	// Ending the transaction releases the lock. If it cannot be ended
	// cleanly, the connection was lost, and the lock with it, at some
	// point during fn: say so, since another migrator may have run too.
	if err := tx.Rollback(); err != nil {
		return errors.Join(fnErr, m.explain(fmt.Errorf("the migration lock's transaction ended early (%w): another migrator may have run at the same time; run the migration again to check the schema", err)))
	}
	return fnErr
}

// Bounds of the pause between two tries for the migration lock: it starts
// at lockPollFirst and doubles up to lockPollMax, drawn at random from its
// upper half so that migrators that started together spread out.
const (
	lockPollFirst = 20 * time.Millisecond
	lockPollMax   = time.Second
)

// lock returns a transaction holding the schema's migration lock, trying
// until it gets it or ctx ends (see locked).
func (m *Migrator) lock(ctx context.Context) (*sql.Tx, error) {
	for try := 1; ; try++ {
		// The transaction outlives ctx's cancellation until fn has
		// returned: database/sql would otherwise roll it back, releasing
		// the lock, while fn's statements may still be finishing.
		tx, err := m.db.BeginTx(context.WithoutCancel(ctx), nil)
		if err != nil {
			return nil, m.explain(fmt.Errorf("connect: %w", err))
		}
		var (
			idleTimeout string // set_config's answer
			locked      bool
		)
		if err := tx.QueryRowContext(ctx, tryLockSQL, m.lockID).Scan(&idleTimeout, &locked); err != nil {
			return nil, errors.Join(m.explain(fmt.Errorf("wait for the migration lock: %w", err)), tx.Rollback())
		}
		if locked {
			return tx, nil
		}
		if err := tx.Rollback(); err != nil {
			return nil, m.explain(fmt.Errorf("wait for the migration lock: %w", err))
		}
		if try == 1 {
			m.logger.InfoContext(ctx, "migrations: another migrator holds the migration lock; waiting for it",
				slog.String("schema", m.schema))
		}
		select {
		case <-ctx.Done():
			return nil, m.explain(fmt.Errorf("wait for the migration lock: %w", context.Cause(ctx)))
		case <-time.After(backoff.Exponential(try, lockPollFirst, lockPollMax)):
		}
	}
}

// Up creates the schema if needed and applies every pending migration,
// then River's (see RiverSince), and then checks that every table is in the
// schema at the expected version (see verify). It returns pgbox's
// migrations it applied: none when the schema was up to date. River's are logged, and
// RiverVersion reports where they stand.
func (m *Migrator) Up(ctx context.Context) ([]Result, error) {
	if err := m.createSchema(ctx); err != nil {
		return nil, err
	}
	var out []Result
	err := m.locked(ctx, func() error {
		res, err := m.provider.Up(ctx)
		out = m.results(res)
		if err != nil {
			return m.explain(err)
		}
		if err := m.riverUp(ctx); err != nil {
			return err
		}
		if err := m.verify(ctx); err != nil {
			return err
		}
		return m.partitionsUp(ctx)
	})
	return out, err
}

// PartitionsSince is the migration from which the inbox and outbox are
// partitioned (internal/partition).
const PartitionsSince = 9

// partitionsUp creates the day partitions from today to
// partition.AheadDefault days ahead, once the schema has reached
// PartitionsSince, so that a new schema does not wait for the maintenance
// job to have them. Rows of a day without a partition would go to the
// default partition meanwhile, so a lock not granted in time is no error.
func (m *Migrator) partitionsUp(ctx context.Context) error {
	v, err := m.Version(ctx)
	if err != nil || v < PartitionsSince {
		return err
	}
	_, err = partition.Maintain(ctx, m.pool, m.schema, partition.Options{
		Ahead: partition.AheadDefault, CreateOnly: true, LockTimeout: partitionsLockTimeout,
	})
	if err != nil {
		return m.explain(fmt.Errorf("partitions: %w", err))
	}
	return nil
}

// partitionsLockTimeout bounds the wait of each partition the migrator
// creates for its locks.
const partitionsLockTimeout = 5 * time.Second

// Down rolls back the newest applied migration. It is an error when none is
// applied.
func (m *Migrator) Down(ctx context.Context) (Result, error) {
	var out Result
	err := m.locked(ctx, func() error {
		current, err := m.Version(ctx)
		if err != nil {
			return err
		}
		if current == 0 {
			return fmt.Errorf("migrations: schema %s has no applied migration to roll back", m.schema)
		}
		if err := m.riverDownBelow(ctx, current-1); err != nil {
			return err
		}
		res, err := m.provider.Down(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			return fmt.Errorf("migrations: schema %s has no applied migration to roll back", m.schema)
		}
		if err != nil {
			return m.explain(err)
		}
		out = m.results([]*goose.MigrationResult{res})[0]
		return nil
	})
	return out, err
}

// DownTo rolls back every applied migration newer than version, newest
// first, River's tables with migration RiverSince. DownTo(ctx, 0) removes
// all of pgbox's tables (and their data).
func (m *Migrator) DownTo(ctx context.Context, version int64) ([]Result, error) {
	if version < 0 || version > pgbox.SchemaVersion {
		return nil, fmt.Errorf("migrations: version %d is out of range: this build knows versions 0 to %d", version, pgbox.SchemaVersion)
	}
	var out []Result
	err := m.locked(ctx, func() error {
		if err := m.riverDownBelow(ctx, version); err != nil {
			return err
		}
		res, err := m.provider.DownTo(ctx, version)
		out = m.results(res)
		if err != nil {
			return m.explain(err)
		}
		return nil
	})
	return out, err
}

// RiverVersion returns the newest River migration applied to the schema (0
// when River's tables are not there) and the newest this build carries,
// which Up applies. It changes nothing.
func (m *Migrator) RiverVersion(ctx context.Context) (have, want int, err error) {
	all := m.river.AllVersions()
	want = all[len(all)-1].Version
	existing, err := m.river.ExistingVersions(ctx)
	if err != nil {
		return 0, want, m.explain(fmt.Errorf("river: %w", err))
	}
	if len(existing) > 0 {
		have = existing[len(existing)-1].Version
	}
	return have, want, nil
}

// riverUp applies River's pending migrations, once the schema has reached
// RiverSince. River runs each in its own transaction; a rerun applies only
// what is missing.
func (m *Migrator) riverUp(ctx context.Context) error {
	v, err := m.Version(ctx)
	if err != nil || v < RiverSince {
		return err
	}
	if _, err := m.river.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return m.explain(fmt.Errorf("river: %w", err))
	}
	return nil
}

// riverDownBelow removes River's tables when the schema is about to go
// below RiverSince, before pgbox's migrations are rolled back.
func (m *Migrator) riverDownBelow(ctx context.Context, target int64) error {
	if target >= RiverSince {
		return nil
	}
	existing, err := m.river.ExistingVersions(ctx)
	if err != nil {
		return m.explain(fmt.Errorf("river: %w", err))
	}
	if len(existing) == 0 {
		return nil
	}
	if _, err := m.river.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}); err != nil {
		return m.explain(fmt.Errorf("river: %w", err))
	}
	return nil
}

// Version returns the schema's current migration version: 0 when it has
// never been migrated. It changes nothing.
func (m *Migrator) Version(ctx context.Context) (int64, error) {
	var v *int64
	err := m.pool.QueryRow(ctx, ident.Render("SELECT max(version_id) FROM /* schema */"+pgbox.MigrationsTable, m.schema)).Scan(&v)
	if isUndefined(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("migrations: read version of schema %s: %w", m.schema, err)
	}
	if v == nil {
		return 0, nil
	}
	return *v, nil
}

// Status lists every migration this build knows, oldest first, and whether
// it is applied. It changes nothing, even in a schema never migrated.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	if v, err := m.Version(ctx); err != nil || v == 0 {
		// goose would create its version table to answer; report instead.
		var out []Status
		for _, src := range m.provider.ListSources() {
			out = append(out, Status{Name: m.names[src.Version], Version: src.Version})
		}
		return out, err
	}
	st, err := m.provider.Status(ctx)
	if err != nil {
		return nil, m.explain(err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		out = append(out, Status{
			Applied:   s.State == goose.StateApplied,
			AppliedAt: s.AppliedAt,
			Name:      m.names[s.Source.Version],
			Version:   s.Source.Version,
		})
	}
	return out, nil
}

// Migrate applies every pending migration to the schema named in opts and
// returns once the schema is at pgbox.SchemaVersion. Re-running it is a
// cheap no-op, so services may call it at every start.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	m, err := New(pool, opts)
	if err != nil {
		return err
	}
	_, err = m.Up(ctx)
	return errors.Join(err, m.Close())
}

// createSchema creates the schema unless it exists. Two migrators may race
// here: CREATE SCHEMA IF NOT EXISTS is not safe against a concurrent
// creation, so the loser sees a unique violation and simply finds the schema
// there on its second try.
func (m *Migrator) createSchema(ctx context.Context) error {
	var err error
	for range 3 {
		_, err = m.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+ident.Quote(m.schema))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != "23505" && pgErr.Code != "42P06") {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("migrations: create schema %s: %w", m.schema, err)
	}
	return nil
}

func (m *Migrator) explain(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		return fmt.Errorf("migrations: schema %s: %w (the role needs CREATE on the database and schema: run migrations as the schema's owner)", m.schema, err)
	}
	return fmt.Errorf("migrations: schema %s: %w", m.schema, err)
}

func (m *Migrator) results(in []*goose.MigrationResult) []Result {
	out := make([]Result, 0, len(in))
	for _, r := range in {
		out = append(out, Result{
			Direction: r.Direction,
			Duration:  r.Duration,
			Name:      m.names[r.Source.Version],
			Version:   r.Source.Version,
		})
	}
	return out
}

func isUndefined(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000")
}

// tryLockSQL takes the migration lock for the rest of the transaction if
// it is free, without waiting, and reports whether it did. It also
// switches idle_in_transaction_session_timeout off for that transaction
// alone (set_config(…, true)), which sits idle while the migrations run: a
// timeout set for the role or the database would otherwise end it, and the
// lock with it, mid-run.
const tryLockSQL = "SELECT pg_catalog.set_config('idle_in_transaction_session_timeout', '0', true), pg_catalog.pg_try_advisory_xact_lock($1)"

// lockID is the advisory lock that serializes migrators of one schema.
// Migrators of different schemas do not wait for each other.
func lockID(schema string) int64 {
	sum := sha256.Sum256([]byte("pgbox migrations " + schema))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// Files returns the embedded migration files, named NNNNN_name.sql, for
// tools that want to show or vendor them.
func Files() fs.FS {
	files, err := fs.Sub(embedded, "sql")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder
	}
	return files
}
