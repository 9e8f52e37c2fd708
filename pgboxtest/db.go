package pgboxtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/migrations"
)

// DB is a pool and a freshly migrated schema of its own, for code that has
// no testing.TB to clean up after it: a runnable Example, a throwaway
// program, a benchmark's setup. Tests should use Schema instead, which
// cleans up by itself.
type DB struct {
	// Pool connects to the database OpenDB was given.
	Pool *pgxpool.Pool
	// Schema is the schema OpenDB created and migrated; give it to every
	// pgbox Config (Config.Schema).
	Schema string
}

// OpenDB connects to url (a PostgreSQL URL or DSN, such as
// os.Getenv("DATABASE_URL")), creates schema (dropping, with everything in
// it, whatever an earlier run left under that name) and migrates it to
// pgbox.SchemaVersion. Close drops the schema and closes the pool.
//
// Use a schema name nothing else uses: OpenDB drops it first.
func OpenDB(ctx context.Context, url, schema string) (*DB, error) {
	if url == "" {
		return nil, errors.New("pgboxtest: no database URL: set DATABASE_URL (for example postgres://postgres@127.0.0.1:5432/postgres)")
	}
	if err := ident.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("pgboxtest: %w", err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("pgboxtest: %w", err)
	}
	db := &DB{Pool: pool, Schema: schema}
	if err := dropSchema(ctx, db.Pool, db.Schema); err != nil {
		pool.Close()
		return nil, err
	}
	if err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgboxtest: migrate schema %s: %w", schema, err)
	}
	return db, nil
}

// Table returns table's name in the DB's schema, quoted and qualified for
// SQL: Table("inbox") is "example".inbox when the schema is example.
func (db *DB) Table(table string) string {
	return ident.Render("/* schema */"+table, db.Schema)
}

// Close drops the DB's schema, with everything in it, and closes the pool.
func (db *DB) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = dropSchema(ctx, db.Pool, db.Schema)
	db.Pool.Close()
}

// dropSchema drops schema, if it exists, with everything in it. A drop
// that PostgreSQL chose to end to break a deadlock is made again: its
// other party is a session still at work in the schema, such as that of
// a process the test has just killed whose statements were already on
// their way, and it ends soon.
func dropSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	const deadlockDetected = "40P01"
	for try := 1; ; try++ {
		_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident.Quote(schema)+" CASCADE")
		var pgErr *pgconn.PgError
		if try < 5 && errors.As(err, &pgErr) && pgErr.Code == deadlockDetected {
			continue
		}
		if err != nil {
			return fmt.Errorf("pgboxtest: drop schema %s: %w", schema, err)
		}
		return nil
	}
}
