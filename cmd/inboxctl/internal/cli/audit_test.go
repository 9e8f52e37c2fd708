package cli

import (
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
)

// auditRecords reads the schema's audit log through inboxctl audit -o json.
func auditRecords(t *testing.T, schema string, args ...string) []admin.AuditRecord {
	t.Helper()
	var records []admin.AuditRecord
	out := inboxctl(t, schema, "", append([]string{"audit", "-o", "json"}, args...)...).ok(t).stdout
	require.NoError(t, json.Unmarshal([]byte(out), &records))
	return records
}

// Replays and discards are recorded as --as NAME, or the OS user, with
// this process and host; a dry run is not recorded. audit lists them
// newest first, in every format, narrowed by --action.
func TestAudit(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	require.Equal(t, "No audit records match.\n", inboxctl(t, schema, "", "audit").ok(t).stdout)

	inboxctl(t, schema, "", "replay", "--status", "dead", "--dry-run").ok(t)
	inboxctl(t, schema, "", "replay", "order-2/placed", "--consumer", "payments", "--as", "alice", "--note", "gateway fixed").ok(t)
	inboxctl(t, schema, "", "discard", "bad-1", "--consumer", "payments", "--reason", "test data").ok(t)

	records := auditRecords(t, schema)
	require.Len(t, records, 2, "a dry run is not recorded")
	me, err := user.Current()
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	discard, replay := records[0], records[1]
	require.Equal(t, admin.AuditDiscard, discard.Action)
	require.Equal(t, me.Username, discard.Actor.Name, "without --as, the OS user")
	require.Equal(t, "test data", discard.Note)
	require.Equal(t, admin.AuditReplay, replay.Action)
	require.Equal(t, admin.Actor{Host: host, Name: "alice", PID: os.Getpid()}, replay.Actor)
	require.EqualValues(t, 1, replay.Affected)
	require.Equal(t, admin.AuditFinished, replay.State)
	require.Equal(t, "gateway fixed", replay.Note)
	require.JSONEq(t, `{"consumer":"payments","ids":["order-2/placed"],"replayable_only":true}`, string(replay.Selection))

	table := inboxctl(t, schema, "", "audit").ok(t).stdout
	require.Regexp(t, `(?m)^ID\s+AT \(UTC\)\s+WHO\s+FROM\s+ACTION\s+STATE\s+AFFECTED\s+SELECTION\s+NOTE$`, table)
	require.Regexp(t, `alice\s+\S+ pid \d+\s+replay\s+finished\s+1\s+\{"ids": \["order-2/placed"\]`, table)
	jsonl := inboxctl(t, schema, "", "audit", "-o", "jsonl", "--action", "replay").ok(t).stdout
	require.Regexp(t, `^\{"action":"replay",.*\}\n$`, jsonl)
	require.Len(t, auditRecords(t, schema, "--since", "1h"), 2)
	require.Empty(t, auditRecords(t, schema, "--since", "2099-01-01T00:00:00Z"))

	bad := inboxctl(t, schema, "", "audit", "--action", "replayed")
	require.Equal(t, ExitUsage, bad.code)
	require.Contains(t, bad.stderr, `--action "replayed": use one of replay, discard, purge`)
}

// replay --payload-file replaces one failed message's payload and replays
// it; it refuses more than one id, a missing or empty file and a message
// that is not replayable, with nothing changed.
func TestReplayPayloadFile(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	dir := t.TempDir()
	fixed := filepath.Join(dir, "fixed.json")
	require.NoError(t, os.WriteFile(fixed, []byte(`{"order":2,"cents":999,"currency":"EUR"}`), 0o600))
	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))

	for _, tc := range []struct {
		args  []string
		code  int
		words string
	}{
		{[]string{"order-2/placed", "order-3/placed", "--consumer", "payments", "--payload-file", fixed}, ExitUsage, "name exactly one id"},
		{[]string{"--status", "dead", "--payload-file", fixed}, ExitUsage, "name exactly one id"},
		{[]string{"order-2/placed", "--payload-file", fixed}, ExitUsage, "needs --consumer"},
		{[]string{"order-2/placed", "--consumer", "payments", "--payload-file", filepath.Join(dir, "nope.json")}, ExitUsage, "no such file"},
		{[]string{"order-2/placed", "--consumer", "payments", "--payload-file", empty}, ExitUsage, "is empty"},
		{[]string{"order-2/placed", "--consumer", "payments", "--payload-file", fixed, "--rate", "1/s"}, ExitUsage, "drop --at, --rate and --over"},
		{[]string{"order-1/placed", "--consumer", "payments", "--payload-file", fixed}, ExitFailure, "message order-1/placed is done"},
		{[]string{"order-404", "--consumer", "payments", "--payload-file", fixed}, ExitNotFound, "holds no message order-404"},
	} {
		r := inboxctl(t, schema, "", append([]string{"replay"}, tc.args...)...)
		require.Equal(t, tc.code, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.words, tc.args)
		if tc.code != ExitUsage {
			require.Contains(t, r.stderr, "nothing was changed", tc.args)
		}
	}
	dry := inboxctl(t, schema, "", "replay", "order-2/placed", "--consumer", "payments", "--payload-file", fixed, "--dry-run").ok(t).stdout
	require.Contains(t, dry, "Would replace the payload of order-2/placed (dead, 23 bytes)")
	status, _, replays := state(t, schema, "payments", "order-2/placed")
	require.Equal(t, "dead", status)
	require.Zero(t, replays)
	require.Empty(t, auditRecords(t, schema))

	out := inboxctl(t, schema, "", "replay", "order-2/placed", "--consumer", "payments", "--payload-file", fixed, "--note", "currency added").ok(t).stdout
	require.Contains(t, out, "Replaced the payload of order-2/placed with "+fixed+" (40 bytes), kept the original, and replayed it.")
	status, _, replays = state(t, schema, "payments", "order-2/placed")
	require.Equal(t, "pending", status)
	require.Equal(t, 1, replays)
	show := inboxctl(t, schema, "", "show", "order-2/placed", "--consumer", "payments").ok(t).stdout
	require.Contains(t, show, `"currency": "EUR"`)
	require.Contains(t, show, "payload edited by an operator (40 bytes, was 23; the original is kept; audit record 1)")
	records := auditRecords(t, schema)
	require.Len(t, records, 1)
	require.Equal(t, admin.AuditEditPayload, records[0].Action)
	require.Equal(t, "currency added", records[0].Note)
}

// replay --rate and --over schedule a throttled replay, which scheduled
// shows with its rate and progress; bad pacing flags are usage errors.
func TestReplayRate(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	for _, tc := range []struct {
		args  []string
		words string
	}{
		{[]string{"--rate", "fast"}, `--rate "fast" is not a rate such as 10/s`},
		{[]string{"--rate", "0/s"}, `--rate "0/s" is not a rate`},
		{[]string{"--rate", "10/s", "--over", "1h"}, "give --rate or --over, not both"},
		{[]string{"--over", "0s"}, `--over "0s" is not a duration`},
	} {
		r := inboxctl(t, schema, "", append([]string{"replay", "--status", "dead", "--yes"}, tc.args...)...)
		require.Equal(t, ExitUsage, r.code, tc.args)
		require.Contains(t, r.stderr, tc.words)
	}
	dry := inboxctl(t, schema, "", "replay", "--consumer", "payments", "--status", "dead", "--over", "30m", "--dry-run").ok(t).stdout
	require.Contains(t, dry, "Would schedule a replay for now (3 messages are replayable now, at 6/h, about 30m0s). Nothing was changed (--dry-run). The newest of them:\n")

	out := inboxctl(t, schema, "", "replay", "--consumer", "payments", "--status", "dead", "--rate", "120/m", "--yes").ok(t).stdout
	require.Contains(t, out, "Scheduled replay 1 for now (3 messages are replayable now, at 2/s, about 1.5s).")
	list := inboxctl(t, schema, "", "scheduled").ok(t).stdout
	require.Regexp(t, `(?m)^1\s+\S+ \S+\s+scheduled\s+2/s\s+0 of 3\s+consumer=payments status=dead`, list)
	records := auditRecords(t, schema)
	require.Len(t, records, 1)
	require.Equal(t, admin.AuditScheduleReplay, records[0].Action)
	require.Equal(t, admin.AuditRunning, records[0].State, "running until the replay ends")
}

// A throttled (or later) replay's --dry-run shows what it would replay,
// as a replay's does: the newest of the messages in a table, every one of
// them with -o jsonl; its JSON has the consumers it would touch (with a
// group, whose consumer --group alone does not name) and the pace.
func TestThrottledReplayDryRun(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	group := regexp.MustCompile(`"fingerprint": "([0-9a-f]{12})"`).FindStringSubmatch(inboxctl(t, schema, "", "failures", "-o", "json").ok(t).stdout)[1]

	table := inboxctl(t, schema, "", "replay", "--group", group, "--rate", "10/s", "--dry-run").ok(t).stdout
	require.Contains(t, table, "Would schedule a replay for now (2 messages are replayable now, at 10/s, about 200ms). Nothing was changed (--dry-run). The newest of them:\n\n")
	require.Regexp(t, `(?m)^\S+ \S+\s+payments\s+order-3/placed\s+ChargeCard\s+-\s+dead`, table)
	require.Regexp(t, `(?m)^\S+ \S+\s+payments\s+order-2/placed\s+ChargeCard\s+customer-7\s+dead`, table)

	var report struct {
		Action    string           `json:"action"`
		At        *time.Time       `json:"at"`
		Consumers map[string]int64 `json:"consumers"`
		DryRun    bool             `json:"dry_run"`
		Matched   int64            `json:"matched"`
		Over      float64          `json:"over_seconds"`
		Rate      float64          `json:"rate_per_second"`
		Selection map[string]any   `json:"selection"`
	}
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "replay", "--group", group, "--rate", "10/s", "--dry-run", "-o", "json").ok(t).stdout), &report))
	require.Equal(t, "schedule replay", report.Action)
	require.True(t, report.DryRun)
	require.EqualValues(t, 2, report.Matched)
	require.Equal(t, map[string]int64{"payments": 2}, report.Consumers)
	require.InDelta(t, 10, report.Rate, 1e-9)
	require.Nil(t, report.At, "now")
	require.Equal(t, group, report.Selection["fingerprint"])

	report.Rate, report.Consumers = 0, nil
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "replay", "--status", "dead", "--over", "30m", "--at", "2h", "--dry-run", "-o", "json").ok(t).stdout), &report))
	require.Equal(t, map[string]int64{"payments": 3}, report.Consumers)
	require.InDelta(t, 1800, report.Over, 1e-9)
	require.InDelta(t, 3.0/1800, report.Rate, 1e-9)
	require.NotNil(t, report.At)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), *report.At, time.Minute)

	lines := inboxctl(t, schema, "", "replay", "--status", "dead", "--rate", "1/s", "--dry-run", "-o", "jsonl").ok(t).stdout
	require.Equal(t, 3, strings.Count(lines, "\n"), "every message, one a line")
	require.Contains(t, lines, `"id":"bad-1"`)
	require.Equal(t, "[]\n", inboxctl(t, schema, "", "scheduled", "-o", "json").ok(t).stdout, "a dry run schedules nothing")
}
