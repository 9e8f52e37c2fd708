package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// -o means the same on every command that prints data: table by default,
// json always, in the shape its help names (one array for a list), jsonl
// where the output is or holds a list, in any case (-o JSON); anything
// else is a usage error.
func TestOutputFlagIsTheSameEverywhere(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(registeredSQL, schema)) // processes to list
	require.NoError(t, err)
	documents := [][]string{
		{"stats"}, {"show", "bad-1"}, {"outbox", "show", "019a0000-0000-7000-8000-000000000002"},
		{"migrate", "version"}, {"migrate", "check"}, {"version"},
		{"purge", "--older-than", "1d", "--dry-run"}, {"outbox", "retry", "--all-dead", "--dry-run"},
		{"pause", "shipping", "--reason", "x"}, {"resume", "payments"},
		{"processes", "release", "2", "--dry-run"},
	}
	lists := [][]string{
		{"list"}, {"failures"}, {"outbox", "list"}, {"scheduled"}, {"migrate", "status"}, {"audit"}, {"processes"}, {"pauses"},
		{"replay", "--status", "dead", "--dry-run"}, {"discard", "--all", "--reason", "x", "--dry-run"},
	}
	// Every command that takes -o is here, and prints what its help says.
	root := (&app{now: time.Now}).rootCommand()
	find := func(args []string) *cobra.Command {
		c, _, err := root.Find(args)
		require.NoError(t, err, "%v", args)
		return c
	}
	for _, c := range outputCommands(root) {
		require.True(t, slices.ContainsFunc(append(documents, lists...), func(args []string) bool { return find(args) == c }),
			"%s takes -o: add it to this test", c.CommandPath())
	}
	for _, args := range append(documents, lists...) {
		r := inboxctl(t, schema, "", append(args, "-o", "json")...).ok(t)
		require.True(t, json.Valid([]byte(r.stdout)), "%v -o json: %s", args, r.stdout)
		var shape any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &shape))
		switch usage := find(args).Flags().Lookup("output").Usage; {
		case strings.Contains(usage, "json (one array)"):
			require.IsType(t, []any{}, shape, "%v -o json: its help promises one array", args)
		case strings.Contains(usage, "json (one object"):
			require.IsType(t, map[string]any{}, shape, "%v -o json: its help promises one object", args)
		}
		bad := inboxctl(t, schema, "", append(args, "-o", "yaml")...)
		require.Equal(t, ExitUsage, bad.code, "%v -o yaml", args)
	}
	for _, args := range documents {
		require.Equal(t, ExitUsage, inboxctl(t, schema, "", append(args, "-o", "jsonl")...).code, "%v: one document, no jsonl", args)
	}
	for _, args := range lists {
		r := inboxctl(t, schema, "", append(args, "-o", "jsonl")...).ok(t)
		for line := range strings.Lines(r.stdout) {
			require.True(t, json.Valid([]byte(line)), "%v -o jsonl: %q", args, line)
		}
	}
	stats := inboxctl(t, schema, "", "stats", "-o", "JSON").ok(t).stdout
	require.True(t, json.Valid([]byte(stats)), "-o JSON, the format in any case: %s", stats)
	first, _, _ := strings.Cut(inboxctl(t, schema, "", "list", "--output", "Jsonl").ok(t).stdout, "\n")
	require.True(t, json.Valid([]byte(first)), "--output Jsonl: %s", first)
	require.Equal(t, "[]\n", inboxctl(t, schema, "", "scheduled", "-o", "json").ok(t).stdout, "an empty list is [], not null")
	require.Equal(t, pgbox.SchemaVersion, strings.Count(inboxctl(t, schema, "", "migrate", "status", "-o", "jsonl").ok(t).stdout, "\n"),
		"one line per migration")
}

// outputCommands returns every command under root that takes -o.
func outputCommands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	if root.Flags().Lookup("output") != nil {
		out = append(out, root)
	}
	for _, sub := range root.Commands() {
		out = append(out, outputCommands(sub)...)
	}
	return out
}

// replay and discard --dry-run print the count and the selection as JSON,
// and every selected message as JSON lines; their table names a flag they
// have when it shows only some.
func TestDryRunOutput(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		SELECT 'payments', 'm-' || i, 'OrderPlaced', 'dead', 5, 5, '\x00', '', 'timeout', /* schema */inbox_bucket('m-' || i)
		FROM generate_series(1, 25) AS i`, schema))
	require.NoError(t, err)

	table := inboxctl(t, schema, "", "replay", "--consumer", "payments", "--dry-run").ok(t).stdout
	require.Contains(t, table, "Would replay 25 messages. Nothing was changed (--dry-run).")
	require.Equal(t, 20, strings.Count(table, "  payments  "), "the newest 20 rows")
	require.Contains(t, table, "Showing the newest 20; add -o jsonl to list all 25 as JSON lines.")
	require.NotContains(t, table, "--limit", "replay has no --limit")

	var report struct {
		Action    string         `json:"action"`
		Changed   int64          `json:"changed"`
		DryRun    bool           `json:"dry_run"`
		Matched   int64          `json:"matched"`
		Selection map[string]any `json:"selection"`
	}
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "replay", "--consumer", "payments", "--dry-run", "-o", "json").ok(t).stdout), &report))
	require.Equal(t, "replay", report.Action)
	require.True(t, report.DryRun)
	require.EqualValues(t, 25, report.Matched)
	require.Zero(t, report.Changed)
	require.Equal(t, map[string]any{"consumer": "payments", "replayable_only": true, "statuses": []any{"dead", "pending"}}, report.Selection,
		"what a replay by filter replays: not the discarded messages unless named")

	lines := inboxctl(t, schema, "", "discard", "--consumer", "payments", "--reason", "x", "--dry-run", "-o", "jsonl").ok(t).stdout
	require.Equal(t, 25, strings.Count(lines, "\n"))
	require.Contains(t, lines, `"id":"m-7"`)

	purge := inboxctl(t, schema, "", "purge", "--older-than", "30d", "--dry-run", "-o", "json").ok(t).stdout
	require.JSONEq(t, `{"action":"purge","changed":0,"dry_run":true,"interrupted":false,"matched":0,"selection":{"older_than":2592000,"status":"done"}}`, purge)

	var done struct {
		Changed int64 `json:"changed"`
		DryRun  bool  `json:"dry_run"`
	}
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "replay", "--consumer", "payments", "--yes", "-o", "json").ok(t).stdout), &done))
	require.Equal(t, int64(25), done.Changed)
	require.False(t, done.DryRun)
}

// replay --at honours -o too: the report for --dry-run, the scheduled
// replay itself otherwise.
func TestReplayAtOutput(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	var dry changeReport
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "replay", "--status", "dead", "--at", "2h", "--dry-run", "-o", "json").ok(t).stdout), &dry))
	require.Equal(t, "schedule replay", dry.Action)
	require.EqualValues(t, 3, dry.Matched)

	var scheduled struct {
		ID    int64  `json:"id"`
		State string `json:"state"`
	}
	out := inboxctl(t, schema, "", "replay", "--status", "dead", "--at", "2h", "--yes", "-o", "json").ok(t).stdout
	require.NoError(t, json.Unmarshal([]byte(out), &scheduled))
	require.Equal(t, []any{int64(1), "scheduled"}, []any{scheduled.ID, scheduled.State})
}

// JSON output is for jq and people: an error text such as "<nil>" or
// "a & b" reads as it is, not as \u003cnil\u003e; a control character is
// still escaped (jsonSafe).
func TestJSONKeepsAngleBrackets(t *testing.T) {
	t.Parallel()
	v := map[string]string{"last_error": "dial: <nil> & >\x1b[2J"}
	var doc, line bytes.Buffer
	require.NoError(t, writeJSON(&doc, v))
	require.NoError(t, writeJSONLine(&line, v))
	require.Equal(t, "{\n  \"last_error\": \"dial: <nil> & >\\u001b[2J\"\n}\n", doc.String())
	require.Equal(t, "{\"last_error\":\"dial: <nil> & >\\u001b[2J\"}\n", line.String())
}
