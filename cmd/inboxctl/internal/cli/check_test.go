package cli

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// checkOutput is what stats --check and processes --check add to -o json.
type checkOutput struct {
	Check struct {
		OK       bool `json:"ok"`
		Problems []struct {
			Consumer string `json:"consumer"`
			Count    int64  `json:"count"`
			Kind     string `json:"kind"`
			Text     string `json:"text"`
		} `json:"problems"`
	} `json:"check"`
}

func (c checkOutput) kinds() map[string]int64 {
	out := map[string]int64{}
	for _, p := range c.Check.Problems {
		out[p.Kind+" "+p.Consumer] = p.Count
	}
	return out
}

// stats --check exits ExitCheckFailed when on-call has something to act
// on: dead or failing messages, dead outbox rows, or due work nobody
// claims (a stall); each is listed with what to run. Otherwise it exits 0.
func TestStatsCheck(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	r := inboxctl(t, schema, "", "stats", "--check")
	require.Equal(t, ExitCheckFailed, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stdout, "\nCheck: 3 problems.\n"+
		"- payments: 3 dead messages: 'inboxctl failures --consumer payments --schema "+schema+"' groups them by cause.\n"+
		"- payments: 1 message failing, retrying after a failure, the next due 2030-01-01 00:00:00 UTC (in ")
	require.Contains(t, r.stdout, "): 'inboxctl failures --consumer payments --schema "+schema+"' shows why.\n"+
		"- outbox: 1 dead row: 'inboxctl outbox list --status dead --schema "+schema+"' shows it.\n")
	require.NotContains(t, r.stdout, "in the inbox:", "the problems say what the footer would have said")
	require.Contains(t, r.stderr, "inboxctl: check failed: 3 problems (listed above)")

	var out checkOutput
	r = inboxctl(t, schema, "", "stats", "--check", "-o", "json")
	require.Equal(t, ExitCheckFailed, r.code)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.False(t, out.Check.OK)
	require.Equal(t, map[string]int64{"dead payments": 3, "failing payments": 1, "outbox_dead ": 1}, out.kinds())
	var stats struct {
		Consumers []any `json:"consumers"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &stats))
	require.Len(t, stats.Consumers, 2, "the stats are all there, as without --check")

	ok := inboxctl(t, pgtest.Schema(t), "", "stats", "--check").ok(t)
	require.Contains(t, ok.stdout, "\nCheck: OK: no dead or failing messages, no dead outbox rows, no work due for more than 5m.\n")
	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "stats", "--check", "--watch").code)
}

// Due work that waits past --stall-after is a stall: inbox, outbox, and
// scheduled replays, those only while no maintainer leads (one that leads
// runs them, however slowly a throttled one goes).
func TestStatsCheckStall(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, available_at, payload_hash, payload, bucket)
		VALUES ('payments', 'waiting', 'E', 'pending', 0, 3, now() - interval '10 minutes', '\x00', '', /* schema */inbox_bucket('waiting')),
		       ('refunds', 'later', 'E', 'pending', 0, 3, now() + interval '1 hour', '\x00', '', /* schema */inbox_bucket('later'));
		INSERT INTO /* schema */outbox (id, topic, event_type, status, available_at, payload, bucket)
		VALUES ('019a0000-0000-7000-8000-0000000000c1', 'orders', 'E', 'pending', now() - interval '7 minutes', '',
		        /* schema */outbox_bucket('019a0000-0000-7000-8000-0000000000c1'));
		INSERT INTO /* schema */scheduled_replays (run_at, filter, state)
		VALUES (now() - interval '9 minutes', '{}', 'running'), (now() - interval '1 minute', '{}', 'scheduled'),
		       (now() + interval '1 hour', '{}', 'scheduled'), (now() - interval '1 hour', '{}', 'done')`, schema))
	require.NoError(t, err)

	r := inboxctl(t, schema, "", "stats", "--check")
	require.Equal(t, ExitCheckFailed, r.code, "stdout: %s", r.stdout)
	require.Regexp(t, `- payments: a message has waited 10m\d*s? since it was due, and no worker has claimed it \(no dispatcher of payments running, `+
		`all stuck, or its ordering key held up behind a failing message\): 'inboxctl processes --schema `+schema+`' shows who runs\.`, r.stdout)
	require.Regexp(t, `- outbox: a row has waited 7m\d*s? since it was due, and no relay has claimed it`, r.stdout)
	require.Regexp(t, `- maintenance: 2 scheduled replays due and unfinished, the earliest due 9m\d*s? ago, and no maintainer leads to run them `+
		`\(a maintenance.Maintainer in a service runs scheduled replays\): 'inboxctl processes --schema `+schema+`' shows who runs, `+
		`'inboxctl scheduled --schema `+schema+`' lists them\.`, r.stdout)
	require.NotContains(t, r.stdout, "refunds:", "a message due later is no stall")

	var out checkOutput
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "stats", "--check", "-o", "json").stdout), &out))
	require.Equal(t, map[string]int64{"stalled payments": 1, "outbox_stalled ": 1, "replay_stalled ": 2}, out.kinds())

	inboxctl(t, schema, "", "stats", "--check", "--stall-after", "1h").ok(t)
	_, err = pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */river_leader (leader_id, elected_at, expires_at) VALUES ('river-1', now(), now() + interval '1 hour')`, schema))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "stats", "--check", "-o", "json").stdout), &out))
	require.Equal(t, map[string]int64{"stalled payments": 1, "outbox_stalled ": 1}, out.kinds(), "a maintainer leads: the replays run")
	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "stats", "--check", "--stall-after", "0s").code)
}

// processes --check exits ExitCheckFailed when a dead process holds
// leases, when work is left with no live process to do it, or when no
// maintainer leads; a process that died and was replaced is no problem.
func TestProcessesCheck(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(processesFixtureSQL, schema))
	require.NoError(t, err)

	r := inboxctl(t, schema, "", "processes", "--check")
	require.Equal(t, ExitCheckFailed, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stdout, "\nCheck: 2 problems.\n"+
		"- payments: dispatcher payments-2b1d (host node-b, pid 977) is dead and holds 3 messages under lease: "+
		"2 wait for their leases to expire, by 2030-01-01 00:05:00 UTC; 1 has an expired lease, for a live dispatcher of payments to take over.\n"+
		"- shipping: dispatcher node-b:978 (host node-b, pid 978) is dead, and no live dispatcher of shipping is running: its work waits. Start one.\n")
	var out checkOutput
	r = inboxctl(t, schema, "", "processes", "--check", "-o", "json")
	require.Equal(t, ExitCheckFailed, r.code)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Equal(t, map[string]int64{"dead_process_leases payments": 3, "no_live_process shipping": 1}, out.kinds())

	// Once the dead dispatchers' leases are gone and shipping has a live
	// dispatcher, the dead rows are history, not a problem.
	_, err = pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		UPDATE /* schema */inbox SET status = 'pending', claim_token = NULL WHERE status = 'running';
		UPDATE /* schema */processes SET heartbeat_ms = 3153600000000 WHERE id = 3`, schema))
	require.NoError(t, err)
	ok := inboxctl(t, schema, "", "processes", "--check").ok(t)
	require.Contains(t, ok.stdout, "\nCheck: OK: no dead process holds leases or leaves work with no live process to do it, and a maintainer leads.\n")

	none := inboxctl(t, pgtest.Schema(t), "", "processes", "--check")
	require.Equal(t, ExitCheckFailed, none.code)
	require.Contains(t, none.stdout, "- maintenance: no maintainer leads: retention and scheduled replays are not running. Start a maintenance.Maintainer in a service.\n")
}
