package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// QueryArgs is a pgx tracer that reports the SQL and arguments of each
// statement a connection sends, alone or in a batch. It may be called from
// many connections at once.
type QueryArgs func(sql string, args []any)

// TraceQueryStart reports a statement sent alone.
func (f QueryArgs) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	f(data.SQL, data.Args)
	return ctx
}

// TraceQueryEnd does nothing.
func (QueryArgs) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart does nothing.
func (QueryArgs) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery reports a statement of a batch.
func (f QueryArgs) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	f(data.SQL, data.Args)
}

// TraceBatchEnd does nothing.
func (QueryArgs) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TracedPool returns a pool of its own, configured as pool, whose
// connections report to tracer; it is closed when the test ends.
func TracedPool(tb testing.TB, pool *pgxpool.Pool, tracer pgx.QueryTracer) *pgxpool.Pool {
	tb.Helper()
	cfg := pool.Config()
	cfg.ConnConfig.Tracer = tracer
	traced, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(traced.Close)
	return traced
}
