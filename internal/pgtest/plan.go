package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Querier is a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Plan returns query's plan (EXPLAIN) with args bound, as the server
// makes it for a first execution.
func Plan(tb testing.TB, q Querier, query string, args ...any) string {
	tb.Helper()
	rows, err := q.Query(context.Background(), "EXPLAIN "+query, args...)
	require.NoError(tb, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(tb, err)
	return strings.Join(lines, "\n")
}

// GenericPlan returns the plan of query's generic plan (the one a
// prepared statement ends up with, made once for every execution), run
// once with args (SQL literals, comma-separated) in a transaction rolled
// back, on a connection of its own to pool's server, with the buffers each
// node read. Each of settings
// (SET LOCAL statements) is run first, as the query's caller would.
func GenericPlan(tb testing.TB, pool *pgxpool.Pool, query, args string, settings ...string) string {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(tb, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(tb, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// A prepared statement outlives a rollback: behind a transaction
	// pooler, the server connection goes on to other clients, so the
	// statement gets a name of its own and is deallocated within the
	// transaction.
	name := fmt.Sprintf("pgtest_generic_%d", rand.Int64())
	for _, s := range append(append([]string{"SET LOCAL plan_cache_mode = force_generic_plan"}, settings...), "PREPARE "+name+" AS "+query) {
		_, err := tx.Exec(ctx, s)
		require.NoError(tb, err, s)
	}
	defer func() { _, _ = tx.Exec(ctx, "DEALLOCATE "+name) }()
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE "+name+"("+args+")")
	require.NoError(tb, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(tb, err)
	return strings.Join(lines, "\n")
}

// NodeBuffers returns the buffers (shared hit plus read) that the first
// node of plan (GenericPlan's) whose line contains node read, 0 if that
// node read none; it fails if there is no such node.
func NodeBuffers(tb testing.TB, plan, node string) int {
	tb.Helper()
	lines := strings.Split(plan, "\n")
	for i, line := range lines {
		if !strings.Contains(line, node) {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		for _, l := range lines[i+1:] {
			if len(l)-len(strings.TrimLeft(l, " ")) <= indent {
				break // the node's own lines end with its children's or a sibling
			}
			if b, ok := strings.CutPrefix(strings.TrimSpace(l), "Buffers: shared "); ok {
				n := 0
				for _, f := range strings.Fields(b) {
					k, v, _ := strings.Cut(f, "=")
					if k == "hit" || k == "read" {
						c, err := strconv.Atoi(v)
						require.NoError(tb, err, l)
						n += c
					}
				}
				return n
			}
		}
		return 0
	}
	require.Failf(tb, "no such node", "no node %q in:\n%s", node, plan)
	return 0
}

// RequireFrontierSkips checks a claim that reads an index of pending rows
// from a frontier, its last argument, over an index that still holds the
// entries of many rows claimed an hour ago: run as GenericPlan runs it,
// with args (the arguments before the frontier) and settings, it must read
// more than many pages of the index (the plan node named node) from the
// index's start (a NULL frontier), and fewer than 10 from a frontier ten
// minutes back; each time the plan must contain claimed, the line that
// shows the claim took the rows it should.
func RequireFrontierSkips(tb testing.TB, pool *pgxpool.Pool, claim, args, node, claimed string, many int, settings ...string) {
	tb.Helper()
	for _, tc := range []struct {
		from string
		read func(pages int) bool
	}{
		{"NULL", func(pages int) bool { return pages > many }},
		{"now() - interval '10 minutes'", func(pages int) bool { return pages < 10 }},
	} {
		plan := GenericPlan(tb, pool, claim, args+", "+tc.from, settings...)
		require.Contains(tb, plan, claimed, "the claim did not take what it should:\n%s", plan)
		pages := NodeBuffers(tb, plan, node)
		require.True(tb, tc.read(pages), "from %s, the claim read %d pages of the pending index:\n%s", tc.from, pages, plan)
	}
}

// RequireNotProbed fails if plan (EXPLAIN ANALYZE's) read the partition
// named part whole or probed its primary key in a node that ran: a claim
// must find its rows again in their own partitions only.
func RequireNotProbed(tb testing.TB, plan, part string) {
	tb.Helper()
	for _, line := range strings.Split(plan, "\n") {
		if strings.Contains(line, " on "+part+" ") && !strings.Contains(line, "never executed") {
			require.NotContains(tb, line, "Seq Scan", plan)
			require.NotContains(tb, line, "_pkey", "the plan probed %s's key:\n%s", part, plan)
		}
	}
}
