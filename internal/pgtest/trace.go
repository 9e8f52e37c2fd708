package pgtest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
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

// FullClaims counts a claimer's claims, and those among them that read the
// pending index from its start (a NULL frontier, see package frontier):
// the statements whose text contains marker, with the frontier as their
// argument number arg (0-based). Its Tracer goes on the claimer's pool.
type FullClaims struct {
	marker string
	arg    int

	mu           sync.Mutex
	claims, full int
}

// NewFullClaims returns a FullClaims for the claims whose text contains
// marker, with the frontier as argument arg.
func NewFullClaims(marker string, arg int) *FullClaims {
	return &FullClaims{marker: marker, arg: arg}
}

// Tracer returns the tracer that counts the claims.
func (c *FullClaims) Tracer() QueryArgs {
	return func(sql string, args []any) {
		if !strings.Contains(sql, c.marker) {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.claims++
		if from, _ := args[c.arg].(*time.Time); from == nil {
			c.full++
		}
	}
}

// RequireAtMost fails unless at least minClaims claims were counted, and at
// most maxFull of them read from the start.
func (c *FullClaims) RequireAtMost(tb testing.TB, minClaims, maxFull int) {
	tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.GreaterOrEqual(tb, c.claims, minClaims, "claims counted")
	require.LessOrEqual(tb, c.full, maxFull, "claims that read the pending index from its start, of %d", c.claims)
}
