package cli

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// fixtureSQL fills a schema with messages in every state, with fixed times
// and ids, so that output can be compared with golden files.
const fixtureSQL = `
INSERT INTO /* schema */inbox
    (consumer, message_id, event_type, status, attempts, max_attempts, replays, available_at, received_at, processed_at,
     ordering_key, payload_hash, payload, metadata, last_error, errors, bucket)
VALUES
('payments', 'order-1/placed', 'OrderPlaced', 'done', 1, 25, 0, '2026-01-01 10:00:00Z', '2026-01-01 10:00:00Z', '2026-01-01 10:00:01Z',
 NULL, '\x00', '{"order":1,"cents":4200}', '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}', NULL, '[]', /* schema */inbox_bucket('order-1/placed')),
('payments', 'order-2/placed', 'ChargeCard', 'dead', 3, 3, 0, '2026-01-01 10:05:00Z', '2026-01-01 10:05:00Z', NULL,
 'customer-7', '\x00', '{"order":2,"cents":999}', '{}',
 'payment gateway timeout after 30s (request 7f9c2a1b-0000-4000-8000-00000000000a)',
 '[{"attempt":1,"at":"2026-01-01T10:05:01Z","error":"payment gateway timeout after 31s (request 7f9c2a1b-0000-4000-8000-000000000001)"},
   {"attempt":2,"at":"2026-01-01T10:05:03Z","error":"payment gateway timeout after 30s (request 7f9c2a1b-0000-4000-8000-000000000002)"},
   {"attempt":3,"at":"2026-01-01T10:05:07Z","error":"payment gateway timeout after 30s (request 7f9c2a1b-0000-4000-8000-00000000000a)"}]', /* schema */inbox_bucket('order-2/placed')),
('payments', 'order-3/placed', 'ChargeCard', 'dead', 2, 2, 1, '2026-01-01 10:06:00Z', '2026-01-01 10:06:00Z', NULL,
 NULL, '\x00', '{"order":3,"cents":150}', '{}',
 'payment gateway timeout after 29s (request 7f9c2a1b-0000-4000-8000-00000000000b)',
 '[{"attempt":1,"at":"2026-01-01T10:06:01Z","error":"payment gateway timeout after 28s (request 7f9c2a1b-0000-4000-8000-000000000003)"},
   {"action":"replayed","at":"2026-01-01T11:00:00Z","replay":1,"previous_status":"dead","previous_attempts":1,"note":"gateway restarted"},
   {"attempt":1,"at":"2026-01-01T11:00:01Z","error":"payment gateway timeout after 30s (request 7f9c2a1b-0000-4000-8000-000000000004)"},
   {"attempt":2,"at":"2026-01-01T11:00:05Z","error":"payment gateway timeout after 29s (request 7f9c2a1b-0000-4000-8000-00000000000b)"}]', /* schema */inbox_bucket('order-3/placed')),
('payments', 'order-4/placed', 'ChargeCard', 'pending', 2, 25, 0, '2030-01-01 00:00:00Z', '2026-01-01 10:07:00Z', NULL,
 NULL, '\x00', '{"order":4,"cents":80}', '{}', 'card declined: insufficient funds',
 '[{"attempt":1,"at":"2026-01-01T10:07:01Z","error":"card declined: insufficient funds"},
   {"attempt":2,"at":"2026-01-01T10:07:03Z","error":"card declined: insufficient funds"}]', /* schema */inbox_bucket('order-4/placed')),
('payments', 'order-5/placed', 'OrderPlaced', 'running', 1, 25, 0, '2030-01-01 00:00:00Z', '2026-01-01 10:08:00Z', NULL,
 NULL, '\x00', '{"order":5}', '{}', NULL, '[]', /* schema */inbox_bucket('order-5/placed')),
('payments', 'bad-1', 'OrderPlaced', 'dead', 1, 1, 0, '2026-01-01 10:09:00Z', '2026-01-01 10:09:00Z', NULL,
 NULL, '\x00', '\xdeadbeef00ff', '{"source":"legacy-importer"}', 'panic: runtime error: index out of range [5] with length 3',
 '[{"attempt":1,"at":"2026-01-01T10:09:01Z","error":"panic: runtime error: index out of range [5] with length 3","trace":"goroutine 7 [running]:\nmain.parse(...)\n\t/app/parse.go:12"}]', /* schema */inbox_bucket('bad-1')),
('shipping', 'order-1/placed', 'OrderPlaced', 'done', 1, 25, 0, '2026-01-01 10:00:00Z', '2026-01-01 10:00:00Z', '2026-01-01 10:00:02Z',
 NULL, '\x00', 'order 1', '{}', NULL, '[]', /* schema */inbox_bucket('order-1/placed')),
('shipping', 'ship-9', 'LabelPrinted', 'discarded', 1, 1, 0, '2026-01-01 10:10:00Z', '2026-01-01 10:10:00Z', NULL,
 NULL, '\x00', '', '{}', 'printer offline',
 '[{"attempt":1,"at":"2026-01-01T10:10:01Z","error":"printer offline"},
   {"action":"discarded","at":"2026-01-01T12:00:00Z","reason":"label reprinted by hand"}]', /* schema */inbox_bucket('ship-9'));

INSERT INTO /* schema */outbox
    (id, topic, event_type, ordering_key, status, attempts, available_at, created_at, published_at, payload, metadata, last_error, errors, bucket)
VALUES
('019a0000-0000-7000-8000-000000000001', 'orders', 'OrderPlaced', 'order-1', 'published', 1, '2026-01-01 10:00:00Z',
 '2026-01-01 10:00:00Z', '2026-01-01 10:00:01Z', '{"order":1}', '{}', NULL, '[]', /* schema */outbox_bucket('019a0000-0000-7000-8000-000000000001')),
('019a0000-0000-7000-8000-000000000002', 'orders', 'OrderPaid', NULL, 'dead', 3, '2026-01-01 10:01:00Z',
 '2026-01-01 10:01:00Z', NULL, '{"order":2}', '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}',
 'publish: nats: no responders available for request',
 '[{"attempt":1,"at":"2026-01-01T10:01:01Z","error":"publish: nats: no responders available for request"},
   {"attempt":2,"at":"2026-01-01T10:01:03Z","error":"publish: nats: no responders available for request"},
   {"attempt":3,"at":"2026-01-01T10:01:07Z","error":"publish: nats: no responders available for request"}]', /* schema */outbox_bucket('019a0000-0000-7000-8000-000000000002')),
('019a0000-0000-7000-8000-000000000003', 'orders', 'OrderShipped', NULL, 'pending', 0, '2030-01-01 00:00:00Z',
 '2026-01-01 10:02:00Z', NULL, 'shipped', '{}', NULL, '[]', /* schema */outbox_bucket('019a0000-0000-7000-8000-000000000003'));
`

// fixture returns a migrated schema holding fixtureSQL's rows.
func fixture(t *testing.T) string {
	t.Helper()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(fixtureSQL, schema))
	require.NoError(t, err)
	return schema
}
