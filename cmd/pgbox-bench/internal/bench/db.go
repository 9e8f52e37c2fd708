package bench

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgbox/pgbox/migrations"
)

// roundTrips counts the statements, batches and COPYs a pool sends: each is
// one round trip to the server (pgx sends a batch in one).
type roundTrips struct{ n atomic.Int64 }

type ctxKey struct{}

// withCounter makes the statements sent with ctx count on c as well.
func withCounter(ctx context.Context, c *atomic.Int64) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

func (r *roundTrips) count(ctx context.Context) context.Context {
	r.n.Add(1)
	if c, ok := ctx.Value(ctxKey{}).(*atomic.Int64); ok {
		c.Add(1)
	}
	return ctx
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return r.count(ctx)
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return r.count(ctx)
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (r *roundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return r.count(ctx)
}
func (r *roundTrips) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// newPool opens a pool of at most maxConns connections whose round trips
// are counted.
func newPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, *roundTrips, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = maxConns
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return pool, rt, nil
}

// freshSchema drops schema and everything in it, then creates it empty,
// and vacuums the catalog churn away, so each measurement starts alike.
func freshSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	q := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+q+" CASCADE; CREATE SCHEMA "+q)
	return err
}

// pgboxSchema makes a freshly migrated pgbox schema.
func pgboxSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := freshSchema(ctx, pool, schema); err != nil {
		return err
	}
	return migrations.Migrate(ctx, pool, migrations.Options{Schema: schema})
}

// riverSchema makes a freshly migrated River schema.
func riverSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := freshSchema(ctx, pool, schema); err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// vacuum analyzes a freshly loaded table, as a real backlog would be by
// autovacuum, so plans do not depend on when autovacuum last ran.
func vacuum(ctx context.Context, pool *pgxpool.Pool, schema, table string) error {
	_, err := pool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{schema, table}.Sanitize())
	return err
}
