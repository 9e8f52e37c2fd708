package cli

import (
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// processesFixtureSQL registers processes with fixed times
// (registeredSQL) and gives them claims (claimsSQL).
const processesFixtureSQL = registeredSQL + claimsSQL

// registeredSQL registers processes with fixed times. A heartbeat of a
// century keeps a process seen in 2026 alive whatever the date; one of a
// second makes it dead. The live maintainer leads, as River's leader table
// says.
const registeredSQL = `
INSERT INTO /* schema */processes (id, kind, consumer, name, host, pid, version, river_id, heartbeat_ms, started_at, last_seen_at) VALUES
(1, 'dispatcher', 'payments', 'payments-7f9c', 'node-a', 4242, 'v0.4.0', NULL, 3153600000000, '2026-01-01 09:00:00Z', '2026-01-01 10:00:00Z'),
(2, 'dispatcher', 'payments', 'payments-2b1d', 'node-b', 977, 'v0.4.0', NULL, 1000, '2026-01-01 09:00:00Z', '2026-01-01 10:00:00Z'),
(3, 'dispatcher', 'shipping', 'node-b:978', 'node-b', 978, 'v0.4.0', NULL, 1000, '2026-01-01 09:00:00Z', '2026-01-01 10:00:00Z'),
(4, 'relay', NULL, 'relay-1', 'node-a', 4242, 'v0.4.0', NULL, 3153600000000, '2026-01-01 09:00:00Z', '2026-01-01 10:00:00Z'),
(5, 'maintainer', NULL, 'node-a:4242', 'node-a', 4242, 'v0.4.0', 'node_a_2026_01_01T09_00_00', 3153600000000, '2026-01-01 09:00:00Z', '2026-01-01 10:00:00Z');

INSERT INTO /* schema */river_leader (leader_id, elected_at, expires_at)
VALUES ('node_a_2026_01_01T09_00_00', '2026-01-01 09:00:01Z', '2999-01-01 00:00:00Z');
`

// claimsSQL adds running messages whose claim tokens carry the ids of
// registeredSQL's processes (id << 32): two held until 2030 by the dead
// dispatcher, one whose lease ended in 2026, one held by the live relay,
// and one running message of a process that no longer exists.
const claimsSQL = `
INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, available_at, claim_token, payload_hash, payload, bucket)
VALUES
('payments', 'charge-1', 'ChargeCard', 'running', 1, 25, '2030-01-01 00:00:00Z', (2::bigint << 32) | 7, '\x00', '', /* schema */inbox_bucket('charge-1')),
('payments', 'charge-2', 'ChargeCard', 'running', 1, 25, '2030-01-01 00:05:00Z', (2::bigint << 32) | 7, '\x00', '', /* schema */inbox_bucket('charge-2')),
('payments', 'charge-3', 'ChargeCard', 'running', 1, 25, '2026-01-01 10:00:30Z', (2::bigint << 32) | 8, '\x00', '', /* schema */inbox_bucket('charge-3')),
('payments', 'charge-4', 'ChargeCard', 'running', 1, 25, '2030-01-01 00:00:00Z', (9::bigint << 32) | 1, '\x00', '', /* schema */inbox_bucket('charge-4')),
('shipping', 'charge-5', 'ChargeCard', 'running', 1, 25, '2030-01-01 00:00:00Z', (2::bigint << 32) | 7, '\x00', '', /* schema */inbox_bucket('charge-5'));

INSERT INTO /* schema */outbox (id, topic, event_type, status, available_at, claim_token, payload, bucket)
VALUES ('019a0000-0000-7000-8000-000000000009', 'orders', 'OrderPaid', 'running', '2030-01-01 00:00:00Z', (4::bigint << 32) | 1, '',
        /* schema */outbox_bucket('019a0000-0000-7000-8000-000000000009'));
`

var sinceSeen = regexp.MustCompile(`("since_seen": )[0-9.]+`)

func TestProcesses(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(processesFixtureSQL, schema))
	require.NoError(t, err)

	golden(t, "processes", schema, inboxctl(t, schema, "", "processes").ok(t).stdout)
	golden(t, "processes_json", schema, sinceSeen.ReplaceAllString(inboxctl(t, schema, "", "ps", "-o", "json").ok(t).stdout, "${1}<seconds>"))
	lines := inboxctl(t, schema, "", "ps", "-o", "jsonl").ok(t).stdout
	require.Len(t, regexp.MustCompile(`(?m)^\{.*\}$`).FindAllString(lines, -1), 5, "one line per process")
}

func TestProcessesNoneRegistered(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	out := inboxctl(t, schema, "", "processes").ok(t).stdout
	require.Contains(t, out, "Maintenance leader: none. No maintainer is alive")
	require.Contains(t, out, "No process is registered.")
	require.Contains(t, inboxctl(t, schema, "", "ps", "-o", "json").ok(t).stdout, `"processes": []`)
	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "ps", "-o", "yaml").code)
}
