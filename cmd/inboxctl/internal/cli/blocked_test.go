package cli

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// A message held behind the fixture's dead order-2/placed (ordering key
// customer-7) is counted as blocked, not fresh; show names its holder
// with the commands that free it; list filters and shows the key.
func TestBlockedBehindADeadHead(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, max_attempts, ordering_key, received_at, available_at,
		                               payload_hash, payload, bucket)
		VALUES ('payments', 'order-6/placed', 'ChargeCard', 'pending', 25, 'customer-7', '2026-01-01 10:11:00Z', '2026-01-01 10:11:00Z',
		        '\x00', '{}', /* schema */inbox_bucket('order-6/placed'))`, schema))
	require.NoError(t, err)

	out := inboxctl(t, schema, "", "stats", "-o", "json").ok(t).stdout
	require.Contains(t, out, `"blocked": 1,`)
	require.Contains(t, out, `"pending_fresh": 0,`, "the blocked message is not fresh")
	out = inboxctl(t, schema, "", "stats").ok(t).stdout
	require.Contains(t, out, "1 message held behind a dead message of their ordering key: they move once it is replayed or discarded.")

	out = inboxctl(t, schema, "", "show", "order-6/placed").ok(t).stdout
	require.Contains(t, out, "Blocked       ordering key customer-7 is held by order-2/placed (dead since 2026-01-01 10:05:07 UTC, 3 attempts): replay or discard it")
	require.Contains(t, out, "inboxctl replay order-2/placed --consumer payments --schema "+schema)
	require.NotContains(t, out, "Next attempt", "no due time already past")
	require.Contains(t, inboxctl(t, schema, "", "show", "order-6/placed", "-o", "json").ok(t).stdout,
		`"blocked_by": {
    "attempts": 3,
    "dead_since": "2026-01-01T10:05:07Z",
    "id": "order-2/placed"
  }`)

	out = inboxctl(t, schema, "", "list", "--ordering-key", "customer-7").ok(t).stdout
	require.Regexp(t, `order-6/placed\s+ChargeCard\s+customer-7\s+pending`, out)
	require.Regexp(t, `order-2/placed\s+ChargeCard\s+customer-7\s+dead`, out)
	require.NotContains(t, out, "order-3/placed")
	_, err = pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		UPDATE /* schema */outbox SET ordering_key = 'order-2' WHERE id = '019a0000-0000-7000-8000-000000000002';
		UPDATE /* schema */outbox SET ordering_key = 'order-2' WHERE id = '019a0000-0000-7000-8000-000000000003'`, schema))
	require.NoError(t, err)
	out = inboxctl(t, schema, "", "outbox", "show", "019a0000-0000-7000-8000-000000000003").ok(t).stdout
	require.Contains(t, out, "Blocked       ordering key order-2 is held by outbox row 019a0000-0000-7000-8000-000000000002 (dead since 2026-01-01 10:01:07 UTC, 3 attempts): retry it")
	require.Contains(t, out, "inboxctl outbox retry 019a0000-0000-7000-8000-000000000002 --schema "+schema)
	out = inboxctl(t, schema, "", "outbox", "list", "--ordering-key", "order-1").ok(t).stdout
	require.Contains(t, out, "019a0000-0000-7000-8000-000000000001")
	require.NotContains(t, out, "019a0000-0000-7000-8000-000000000002")
}
