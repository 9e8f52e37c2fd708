package cli

import (
	"context"
	"regexp"
	"strings"
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

// processes release ends a dead dispatcher's held leases after a
// confirmation, says what it did and what is left, refuses a live process
// without --force and an unknown one, and changes nothing on a dry run.
func TestProcessesRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	_, err := pool.Exec(ctx, ident.Render(processesFixtureSQL, schema))
	require.NoError(t, err)
	held := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, ident.Render(
			"SELECT count(*) FROM /* schema */inbox WHERE consumer = 'payments' AND available_at > now()", schema)).Scan(&n))
		return n
	}
	require.Equal(t, 3, held(), "charge-1, charge-2 (the dead dispatcher 2's) and charge-4 (no process's)")

	r := inboxctl(t, schema, "", "processes", "release", "2", "--dry-run").ok(t)
	require.Contains(t, r.stdout, "Would release 2 messages of consumer payments (their leases end by 2030-01-01 00:05:00 UTC) held by dead dispatcher payments-2b1d (id 2, host node-b, pid 977")
	require.Equal(t, 3, held())

	r = inboxctl(t, schema, "no\n", "processes", "release", "2")
	require.Equal(t, ExitFailure, r.code)
	require.Contains(t, r.stderr, "Release 2 messages of consumer payments")
	require.Contains(t, r.stderr, "not confirmed: nothing was released")
	require.Equal(t, 3, held())

	r = inboxctl(t, schema, "yes\n", "processes", "release", "2").ok(t)
	require.Contains(t, r.stdout, "Released 2 messages of consumer payments: a live dispatcher of payments takes them over now, and counts the lost attempt.")
	require.Contains(t, r.stdout, "1 message of consumer payments already has an expired lease", "charge-3")
	require.Equal(t, 1, held(), "charge-4 is no process's")

	r = inboxctl(t, schema, "", "processes", "release", "2", "--yes", "-o", "json").ok(t)
	require.Contains(t, r.stdout, `"changed": 0`)
	require.Contains(t, r.stdout, `"state": "dead"`)

	r = inboxctl(t, schema, "", "processes", "release", "4", "--yes")
	require.Equal(t, ExitFailure, r.code)
	require.Contains(t, r.stderr, "relay relay-1 (id 4, host node-a, pid 4242) is alive")
	require.Contains(t, r.stderr, "add --force; nothing was released")

	r = inboxctl(t, schema, "", "processes", "release", "4", "--yes", "--force").ok(t)
	require.Contains(t, r.stderr, "Warning: alive relay relay-1 (id 4")
	require.Contains(t, r.stdout, "Released 1 outbox row: a live relay takes it over now")
	require.Contains(t, r.stdout, "No other live relay is running: start one, or they wait.")

	require.Equal(t, ExitNotFound, inboxctl(t, schema, "", "processes", "release", "9", "--yes").code)
	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "processes", "release", "two").code)
	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "processes", "release").code)

	audit := inboxctl(t, schema, "", "audit", "-o", "json").ok(t).stdout
	require.Equal(t, 2, strings.Count(audit, `"action": "release_leases"`), "each release that ran; one that found nothing to release changes nothing, and is not recorded")
}
