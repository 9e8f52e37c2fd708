package admin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Throughput reads the window's done messages through inbox_done_idx,
// never the whole dedupe memory: on an analyzed inbox of 30,000 done
// messages processed over 8 hours, the last hour's plan starts from the
// index.
func TestThroughputUsesDoneIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
		SELECT 'payments', 'm-' || g, 'ChargeCard', 'done', 1, 3, '\x00'::bytea, ''::bytea, now() - g * interval '1 second', /* schema */inbox_bucket('m-' || g)
		FROM generate_series(1, 30000) AS g`, schema))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ident.Render("ANALYZE /* schema */inbox", schema))
	require.NoError(t, err)

	plan := pgtest.Plan(t, pool, ident.Render(throughputSQL, schema), nil, 60)
	requireNoScanOfRows(t, pool, schema, plan, "throughput")
	require.Contains(t, plan, "_done_idx on inbox_g0", "the partition holding the rows is read through its inbox_done_idx")
}
