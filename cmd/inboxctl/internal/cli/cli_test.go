package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the current output")

// result is one run of inboxctl.
type result struct {
	code           int
	stdout, stderr string
}

// inboxctl runs the CLI against the test database and schema, with stdin.
func inboxctl(t *testing.T, schema, stdin string, args ...string) result {
	t.Helper()
	return inboxctlEnv(t, map[string]string{"DATABASE_URL": pgtest.URL(t)}, stdin, append(args, "--schema", schema)...)
}

func inboxctlEnv(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return env[k] })
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

var (
	ages    = regexp.MustCompile(`\b\d+d\d+h\b`)
	seconds = regexp.MustCompile(`("oldest_(pending|unpublished)": )[0-9.]+`)
	spaces  = regexp.MustCompile(`  +`)
	nowLine = regexp.MustCompile(`(at |"at": "|until=)\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?Z?( UTC)?`)
)

// golden compares got with testdata/name.golden (or rewrites it with
// -update), after replacing what varies between runs: the schema's name,
// the current time and the ages measured from it. An age's width changes
// with the calendar, and with it a table's alignment, so where an age was
// replaced the columns are compared with their spacing collapsed.
func golden(t *testing.T, name, schema, got string) {
	t.Helper()
	got = strings.ReplaceAll(got, schema, "SCHEMA")
	got = seconds.ReplaceAllString(got, "${1}<seconds>")
	got = nowLine.ReplaceAllString(got, "${1}<now>")
	if ages.MatchString(got) {
		got = ages.ReplaceAllString(got, "<age>")
		got = spaces.ReplaceAllString(got, "  ")
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	require.Equal(t, string(want), got, "output differs from %s (run go test -update to accept it)", path)
}

func (r result) ok(t *testing.T) result {
	t.Helper()
	require.Equal(t, ExitOK, r.code, "stderr: %s", r.stderr)
	return r
}

func TestStats(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	golden(t, "stats", schema, inboxctl(t, schema, "", "stats").ok(t).stdout)
	golden(t, "stats_json", schema, inboxctl(t, schema, "", "stats", "-o", "json").ok(t).stdout)
}

// frameCounter is stdout for --watch: it cancels the run once it has seen
// enough frames.
type frameCounter struct {
	bytes.Buffer
	cancel      context.CancelFunc
	cancelAfter int
}

func (f *frameCounter) Write(p []byte) (int, error) {
	n, err := f.Buffer.Write(p)
	if strings.Count(f.String(), "OUTBOX") >= f.cancelAfter {
		f.cancel()
	}
	return n, err
}

func TestList(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	golden(t, "list", schema, inboxctl(t, schema, "", "list").ok(t).stdout)
	golden(t, "list_dead", schema, inboxctl(t, schema, "", "list", "--status", "dead", "--consumer", "payments").ok(t).stdout)
	golden(t, "list_json", schema, inboxctl(t, schema, "", "list", "--type", "ChargeCard", "-o", "json").ok(t).stdout)
	golden(t, "list_jsonl", schema, inboxctl(t, schema, "", "list", "--error-contains", "TIMEOUT", "-o", "jsonl").ok(t).stdout)

	limited := inboxctl(t, schema, "", "list", "--limit", "2").ok(t).stdout
	require.Contains(t, limited, "Showing the newest 2; raise --limit")
	require.Equal(t, 2, strings.Count(limited, "\n2026-"), "two rows")

	since := inboxctl(t, schema, "", "list", "--since", "2026-01-01T10:06:00Z", "--until", "2026-01-01T10:09:00Z").ok(t).stdout
	require.Contains(t, since, "order-3/placed")
	require.Contains(t, since, "order-5/placed")
	require.NotContains(t, since, "order-2/placed")
	require.NotContains(t, since, "bad-1")
	// The same window as inboxctl prints times, in UTC, pasted (--until
	// taking in the whole second, or minute, the time is cut to); a time
	// without its zone is refused, saying how to give it.
	require.Equal(t, since, inboxctl(t, schema, "", "list", "--since", "2026-01-01 10:06:00 UTC", "--until", "2026-01-01 10:08:00 UTC").ok(t).stdout)
	require.Equal(t, since, inboxctl(t, schema, "", "list", "--since", "2026-01-01 10:06 UTC", "--until", "2026-01-01 10:08 UTC").ok(t).stdout)
	for zoneless, utc := range map[string]string{"2026-01-01": "2026-01-01 00:00 UTC", "2026-01-01T10:06": "2026-01-01 10:06 UTC"} {
		r := inboxctl(t, schema, "", "list", "--since", zoneless)
		require.Equal(t, ExitUsage, r.code, zoneless)
		require.Contains(t, r.stderr, `--since "`+zoneless+`" has no time zone: add UTC, as inboxctl prints times (`+utc+`), or an offset`)
	}

	matched := inboxctl(t, schema, "", "list", "--error-matches", `index out of range \[\d+\]`).ok(t).stdout
	require.Contains(t, matched, "bad-1")
	require.NotContains(t, matched, "order-")
	require.Contains(t, inboxctl(t, schema, "", "list", "--consumer", "shipping", "--type", "nothing").ok(t).stdout, "(no messages match)")

	// Bad input is a usage error (exit 2), named once.
	r := inboxctl(t, schema, "", "list", "--error-matches", "([")
	require.Equal(t, ExitUsage, r.code)
	require.Contains(t, r.stderr, "inboxctl: list messages: the error pattern is not a valid regular expression: brackets [] not balanced\n")
	for _, args := range [][]string{{"list", "--limit", "-1"}, {"failures", "--limit", "-5"}, {"outbox", "list", "--limit", "-1"}, {"scheduled", "--limit", "-1"}} {
		r := inboxctl(t, schema, "", args...)
		require.Equal(t, ExitUsage, r.code, "%q", args)
		require.Contains(t, r.stderr, "inboxctl: --limit "+args[len(args)-1]+": use a count of 0 or more\n", "%q", args)
	}
}

func TestShow(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	golden(t, "show_dead", schema, inboxctl(t, schema, "", "show", "order-3/placed").ok(t).stdout)
	golden(t, "show_panic_binary", schema, inboxctl(t, schema, "", "show", "bad-1").ok(t).stdout)
	golden(t, "show_json", schema, inboxctl(t, schema, "", "show", "order-1/placed", "--consumer", "payments", "-o", "json").ok(t).stdout)

	ambiguous := inboxctl(t, schema, "", "show", "order-1/placed")
	require.Equal(t, ExitUsage, ambiguous.code)
	require.Contains(t, ambiguous.stderr, `message "order-1/placed" is held by several consumers (payments, shipping): pick one with --consumer`)

	missing := inboxctl(t, schema, "", "show", "order-404")
	require.Equal(t, ExitNotFound, missing.code)
	require.Contains(t, missing.stderr, `message "order-404": not found`)
	require.Equal(t, ExitNotFound, inboxctl(t, schema, "", "show", "order-1/placed", "--consumer", "billing").code)
}

func TestFailuresGroupsByCause(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	out := inboxctl(t, schema, "", "failures").ok(t).stdout
	golden(t, "failures", schema, out)
	golden(t, "failures_json", schema, inboxctl(t, schema, "", "failures", "-o", "json").ok(t).stdout)

	// The two gateway timeouts differ in numbers and request ids but are
	// one group, which replay --group selects.
	require.Regexp(t, `2\s+2\s+0\s+payments\s+ChargeCard\s+([0-9a-f]{12})`, out)
	group := regexp.MustCompile(`2\s+2\s+0\s+payments\s+ChargeCard\s+([0-9a-f]{12})`).FindStringSubmatch(out)[1]
	dry := inboxctl(t, schema, "", "replay", "--group", group, "--dry-run").ok(t).stdout
	require.Contains(t, dry, "Would replay 2 messages")
	require.Contains(t, dry, "order-2/placed")
	require.Contains(t, dry, "order-3/placed")

	require.Contains(t, inboxctl(t, pgtest.Schema(t), "", "failures").ok(t).stdout, "No dead or failing messages.")
}

// state reads a message's status, attempts and replays.
func state(t *testing.T, schema, consumer, id string) (status string, attempts, replays int) {
	t.Helper()
	err := pgtest.Pool(t).QueryRow(context.Background(), ident.Render(
		"SELECT status, attempts, replays FROM /* schema */inbox WHERE consumer = $1 AND message_id = $2", schema), consumer, id).
		Scan(&status, &attempts, &replays)
	require.NoError(t, err)
	return status, attempts, replays
}

func TestReplayByID(t *testing.T) {
	t.Parallel()
	schema := fixture(t)

	done := inboxctl(t, schema, "", "replay", "order-1/placed", "order-2/placed", "--consumer", "payments")
	require.Equal(t, ExitFailure, done.code)
	require.Contains(t, done.stderr, "cannot replay: order-1/placed is done (only dead, discarded or failing messages are replayed")
	require.Contains(t, done.stderr, "nothing was replayed")
	status, _, _ := state(t, schema, "payments", "order-2/placed")
	require.Equal(t, "dead", status, "a refused id must leave its neighbours alone too")

	missing := inboxctl(t, schema, "", "replay", "order-2/placed", "order-404", "--consumer", "payments")
	require.Equal(t, ExitNotFound, missing.code)
	require.Contains(t, missing.stderr, `consumer "payments" holds no message order-404`)

	running := inboxctl(t, schema, "", "replay", "order-5/placed", "--consumer", "payments")
	require.Equal(t, ExitFailure, running.code)
	require.Contains(t, running.stderr, "order-5/placed is running")

	r := inboxctl(t, schema, "", "replay", "order-2/placed", "order-3/placed", "--consumer", "payments", "--note", "gateway fixed").ok(t)
	require.Equal(t, "Replayed 2 messages.\n", r.stdout)
	status, attempts, replays := state(t, schema, "payments", "order-3/placed")
	require.Equal(t, []any{"pending", 0, 2}, []any{status, attempts, replays}, "pending, attempts zeroed, second replay counted")

	show := inboxctl(t, schema, "", "show", "order-3/placed").ok(t).stdout
	require.Contains(t, show, "replayed 2 times")
	require.Contains(t, show, "replayed by an operator (replay 2; was dead after 2 attempts): gateway fixed")
	require.Contains(t, show, "attempt 2 failed: payment gateway timeout after 29s", "the history is kept")
	require.Contains(t, inboxctl(t, schema, "", "list", "--consumer", "payments", "--type", "ChargeCard").ok(t).stdout, "2")
}

func TestReplayByFilterAsksFirst(t *testing.T) {
	t.Parallel()
	schema := fixture(t)

	declined := inboxctl(t, schema, "no\n", "replay", "--consumer", "payments", "--status", "dead")
	require.Equal(t, ExitFailure, declined.code)
	require.Contains(t, declined.stderr, "Replay 3 messages (consumer=payments status=dead) in schema "+schema+"? Type yes to continue:")
	require.Contains(t, declined.stderr, "not confirmed: nothing was replayed")
	status, _, _ := state(t, schema, "payments", "bad-1")
	require.Equal(t, "dead", status)

	noInput := inboxctl(t, schema, "", "replay", "--consumer", "payments", "--status", "dead")
	require.Equal(t, ExitFailure, noInput.code, "no answer is no")

	r := inboxctl(t, schema, "yes\n", "replay", "--consumer", "payments", "--status", "dead").ok(t)
	require.Equal(t, "Replayed 3 messages.\n", r.stdout)
	for _, id := range []string{"order-2/placed", "order-3/placed", "bad-1"} {
		status, attempts, _ := state(t, schema, "payments", id)
		require.Equal(t, "pending", status, id)
		require.Zero(t, attempts, id)
	}
	status, _, replays := state(t, schema, "payments", "order-1/placed")
	require.Equal(t, "done", status, "done messages are never replayed")
	require.Zero(t, replays)

	// --all replays every dead or failing message (the one backing off
	// too), never done or running ones, and leaves the discarded one until
	// --status names it.
	inboxctl(t, schema, "", "replay", "--all", "--yes").ok(t)
	status, _, _ = state(t, schema, "shipping", "ship-9")
	require.Equal(t, "discarded", status)
	status, _, _ = state(t, schema, "payments", "order-5/placed")
	require.Equal(t, "running", status)
	require.Equal(t, "Replayed 1 message.\n", inboxctl(t, schema, "", "replay", "--status", "discarded", "--yes").ok(t).stdout)
	status, _, _ = state(t, schema, "shipping", "ship-9")
	require.Equal(t, "pending", status)

	nothing := inboxctl(t, schema, "", "replay", "--consumer", "payments", "--status", "dead", "--yes").ok(t)
	require.Equal(t, "Nothing to replay: no eligible message matches.\n", nothing.stdout)

	// A status replay never takes is a usage error, not "nothing to replay".
	for _, args := range [][]string{
		{"replay", "--status", "done", "--yes"},
		{"replay", "--consumer", "payments", "--status", "dead,running", "--yes"},
		{"replay", "--status", "done", "--at", "2h", "--yes"},
	} {
		r := inboxctl(t, schema, "", args...)
		require.Equal(t, ExitUsage, r.code, "%q: %s", args, r.stdout)
		require.Contains(t, r.stderr, "only dead, discarded or failing messages are replayed", "%q", args)
	}
}

func TestReplayDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	golden(t, "replay_dry_run", schema, inboxctl(t, schema, "", "replay", "--status", "dead", "--dry-run").ok(t).stdout)
	status, _, replays := state(t, schema, "payments", "order-2/placed")
	require.Equal(t, "dead", status)
	require.Zero(t, replays)
}

// A bulk replay of 100,000 dead messages runs in bounded batches: each
// batch is its own statement, which the replays' history entries show (one
// database timestamp per statement).
func TestBulkReplayOf100kDeadMessagesRunsInBatches(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	_, err := pool.Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		SELECT 'payments', 'm-' || i, 'OrderPlaced', 'dead', 5, 5, '\x00', '', 'timeout', /* schema */inbox_bucket('m-' || i)
		FROM generate_series(1, 100000) AS i`, schema))
	require.NoError(t, err)

	r := inboxctl(t, schema, "", "replay", "--consumer", "payments", "--status", "dead", "--yes", "--batch-size", "1000").ok(t)
	require.Equal(t, "Replayed 100,000 messages.\n", r.stdout)

	var pending, statements int
	require.NoError(t, pool.QueryRow(context.Background(), ident.Render(`
		SELECT count(*) FILTER (WHERE status = 'pending' AND attempts = 0 AND replays = 1),
		       count(DISTINCT errors->-1->>'at')
		FROM /* schema */inbox`, schema)).Scan(&pending, &statements))
	require.Equal(t, 100000, pending)
	require.Equal(t, 100, statements, "100 statements of 1,000 rows each, not one giant one")
}

func TestDiscard(t *testing.T) {
	t.Parallel()
	schema := fixture(t)

	noReason := inboxctl(t, schema, "", "discard", "bad-1", "--consumer", "payments")
	require.Equal(t, ExitUsage, noReason.code)
	require.Contains(t, noReason.stderr, "--reason is required")

	notDead := inboxctl(t, schema, "", "discard", "order-4/placed", "--consumer", "payments", "--reason", "x")
	require.Equal(t, ExitFailure, notDead.code)
	require.Contains(t, notDead.stderr, "cannot discard: order-4/placed is pending (only dead messages are discarded)")

	inboxctl(t, schema, "", "discard", "bad-1", "--consumer", "payments", "--reason", "legacy import, fixed by hand").ok(t)
	status, _, _ := state(t, schema, "payments", "bad-1")
	require.Equal(t, "discarded", status)
	require.Contains(t, inboxctl(t, schema, "", "show", "bad-1").ok(t).stdout, "discarded by an operator: legacy import, fixed by hand")

	r := inboxctl(t, schema, "", "discard", "--error-contains", "gateway timeout", "--reason", "refunded", "--yes").ok(t)
	require.Equal(t, "Discarded 2 messages.\n", r.stdout)
}

func TestPurge(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "purge").code)
	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "purge", "--older-than", "soon").code)
	dead := inboxctl(t, schema, "", "purge", "--older-than", "1d", "--status", "dead")
	require.Equal(t, ExitUsage, dead.code)
	require.Contains(t, dead.stderr, "only done or discarded messages can be purged")

	require.Equal(t, "Would delete 2 done messages older than 1d. Nothing was changed (--dry-run).\n",
		inboxctl(t, schema, "", "purge", "--older-than", "1d", "--dry-run").ok(t).stdout)
	require.Equal(t, "Nothing to purge: no done message older than 100000d.\n",
		inboxctl(t, schema, "", "purge", "--older-than", "100000d").ok(t).stdout)
	require.Equal(t, "Deleted 1 done message.\n",
		inboxctl(t, schema, "yes\n", "purge", "--older-than", "1d", "--consumer", "shipping").ok(t).stdout)

	var left int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), ident.Render("SELECT count(*) FROM /* schema */inbox", schema)).Scan(&left))
	require.Equal(t, 7, left, "only shipping's done message is gone; dead and pending stay")
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	golden(t, "outbox_list", schema, inboxctl(t, schema, "", "outbox", "list").ok(t).stdout)
	golden(t, "outbox_list_json", schema, inboxctl(t, schema, "", "outbox", "list", "--status", "dead", "-o", "json").ok(t).stdout)
	golden(t, "outbox_show", schema, inboxctl(t, schema, "", "outbox", "show", "019a0000-0000-7000-8000-000000000002").ok(t).stdout)

	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "outbox", "show", "not-a-uuid").code)
	require.Equal(t, ExitNotFound, inboxctl(t, schema, "", "outbox", "show", "019a0000-0000-7000-8000-0000000000ff").code)
	published := inboxctl(t, schema, "", "outbox", "retry", "019a0000-0000-7000-8000-000000000001")
	require.Equal(t, ExitFailure, published.code)
	require.Contains(t, published.stderr, "is published, not dead: only dead rows are retried")
	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "outbox", "retry").code)

	require.Equal(t, "Would retry 1 dead outbox row. Nothing was changed (--dry-run).\n",
		inboxctl(t, schema, "", "outbox", "retry", "--all-dead", "--dry-run").ok(t).stdout)
	inboxctl(t, schema, "", "outbox", "retry", "--all-dead", "--yes").ok(t)
	show := inboxctl(t, schema, "", "outbox", "show", "019a0000-0000-7000-8000-000000000002").ok(t).stdout
	require.Contains(t, show, "pending after 0 attempts, retried by an operator 1 time")
	require.Contains(t, show, "retried by an operator (was dead after 3 attempts)")
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	schema := pgtest.EmptySchema(t)
	require.Contains(t, inboxctl(t, schema, "", "migrate", "version").ok(t).stdout, "is at version 0")
	golden(t, "migrate_status_empty", schema, inboxctl(t, schema, "", "migrate", "status").ok(t).stdout)
	up := inboxctl(t, schema, "", "migrate", "up").ok(t).stdout
	require.Contains(t, up, "applied 00001_inbox.sql")
	require.Contains(t, up, "applied 00004_maintenance.sql")
	require.Contains(t, up, "applied 00005_inbox_claims.sql")
	require.Regexp(t, `River's job tables \(for package maintenance\): at River migration \d+, up to date`, up)
	require.Contains(t, inboxctl(t, schema, "", "migrate", "up").ok(t).stdout, "is up to date")
	require.Contains(t, inboxctl(t, schema, "", "migrate", "status").ok(t).stdout, "up to date")
	require.Contains(t, inboxctl(t, schema, "", "stats").ok(t).stdout, "(no messages)")

	declined := inboxctl(t, schema, "", "migrate", "down")
	require.Equal(t, ExitFailure, declined.code)
	require.Contains(t, declined.stderr, fmt.Sprintf("back from version %d to %d, dropping tables and their data? Type yes to continue",
		pgbox.SchemaVersion, pgbox.SchemaVersion-1))
	require.NotContains(t, declined.stderr, "River")
	declined = inboxctl(t, schema, "", "migrate", "down", "--to", "3")
	require.Equal(t, ExitFailure, declined.code)
	require.Contains(t, declined.stderr, "(River's job tables included)")
	require.Contains(t, inboxctl(t, schema, "", "migrate", "down", "--to", "0", "--yes").ok(t).stdout, "is at version 0")

	unmigrated := inboxctl(t, schema, "", "stats")
	require.Equal(t, ExitFailure, unmigrated.code)
	require.Contains(t, unmigrated.stderr, "its migrations were rolled back): run inboxctl migrate up --schema "+schema)
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	for _, args := range [][]string{
		{"list", "--bogus"},
		{"list", "-o", "yaml"},
		{"list", "--status", "lost"},
		{"list", "--since", "yesterday"},
		{"outbox", "list", "--status", "failed"},
		{"show"},
		{"replay"},
		{"replay", "order-2/placed"},
		{"replay", "order-2/placed", "--consumer", "payments", "--status", "dead"},
		{"stats", "--watch", "--interval", "1ms"},
		{"no-such-command"},
	} {
		r := inboxctl(t, schema, "", args...)
		require.Equal(t, ExitUsage, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "inboxctl --help", "%v", args)
	}
	// A misspelt flag gets the nearest one, its own or inherited, as a
	// misspelt command does; a name unlike any gets no guess.
	for args, want := range map[string]string{
		"list --consumr payments":   "unknown flag: --consumr (did you mean --consumer?)",
		"replay --stauts=dead":      "unknown flag: --stauts (did you mean --status?)",
		"stats --shcema x":          "unknown flag: --shcema (did you mean --schema?)",
		"replay --dry":              "unknown flag: --dry (did you mean --dry-run?)",
		"list --bogus":              "unknown flag: --bogus\n",
		"failures --consumer-group": "unknown flag: --consumer-group\n",
		"replay --ids":              "unknown flag: --ids\n",
		"list --o":                  "unknown flag: --o\n",
		"list --x":                  "unknown flag: --x\n",
	} {
		r := inboxctl(t, schema, "", strings.Fields(args)...)
		require.Equal(t, ExitUsage, r.code, args)
		require.Contains(t, r.stderr, want, args)
	}
}

func TestNoDatabaseIsAUsageError(t *testing.T) {
	t.Parallel()
	r := inboxctlEnv(t, nil, "", "stats")
	require.Equal(t, ExitUsage, r.code)
	require.Contains(t, r.stderr, "no database: pass --dsn or set DATABASE_URL")
}

// A password in the DSN never reaches the output, whatever goes wrong.
func TestPasswordIsNeverPrinted(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://ops:s3cr%40t-p4ss@127.0.0.1:1/pgbox?connect_timeout=2",
		"host=127.0.0.1 port=1 user=ops password=s3cr@t-p4ss dbname=pgbox connect_timeout=2",
		"postgres://ops:s3cr%40t-p4ss@127.0.0.1:1/pgbox?sslmode=bogus",
	} {
		r := inboxctlEnv(t, nil, "", "stats", "--dsn", dsn)
		require.NotEqual(t, ExitOK, r.code)
		require.NotContains(t, r.stderr+r.stdout, "s3cr@t-p4ss", dsn)
		require.NotContains(t, r.stderr+r.stdout, "s3cr%40t-p4ss", dsn)
		require.NotContains(t, r.stderr+r.stdout, "p4ss", dsn)
	}
}

// replay --at records a replay for the maintenance job, changes nothing
// now, and shows in scheduled and stats until it is cancelled or done.
func TestReplayAt(t *testing.T) {
	t.Parallel()
	schema := fixture(t)

	r := inboxctl(t, schema, "", "replay", "--status", "dead", "--at", "2099-01-01T00:00:00Z", "--note", "after the gateway's upgrade", "--yes").ok(t)
	require.Contains(t, r.stdout, "Scheduled replay 1 for 2099-01-01 00:00:00 UTC (3 messages are replayable now)")
	const noMaintainer = "inboxctl: warning: no maintainer is alive, so no scheduled or throttled replay runs until one starts"
	require.Contains(t, r.stderr, noMaintainer, "the fixture runs no maintainer")
	require.Contains(t, inboxctl(t, schema, "", "scheduled").ok(t).stderr, noMaintainer)
	status, _, _ := state(t, schema, "payments", "order-2/placed")
	require.Equal(t, "dead", status, "nothing changes before the time")

	// A time as inboxctl prints it (UTC) reads the same as one with its zone.
	byID := inboxctl(t, schema, "", "replay", "order-2/placed", "--consumer", "payments", "--at", "2099-01-02 00:00 UTC").ok(t).stdout
	require.Contains(t, byID, "Scheduled replay 2 for 2099-01-02 00:00:00 UTC (1 message is replayable now)")
	require.Equal(t, ExitNotFound, inboxctl(t, schema, "", "replay", "order-404", "--consumer", "payments", "--at", "1h").code)

	golden(t, "scheduled", schema, inboxctl(t, schema, "", "scheduled").ok(t).stdout)
	require.Contains(t, inboxctl(t, schema, "", "scheduled", "-o", "json").ok(t).stdout, `"run_at": "2099-01-01T00:00:00Z"`)
	require.Contains(t, inboxctl(t, schema, "", "stats").ok(t).stdout, "2 scheduled replays waiting or under way: 'inboxctl scheduled --schema "+schema+"' lists them.")

	require.Contains(t, inboxctl(t, schema, "", "replay", "--status", "dead", "--at", "2h", "--dry-run").ok(t).stdout,
		"Would schedule a replay for ")
	past := inboxctl(t, schema, "", "replay", "--all", "--at", "2001-01-01T00:00:00Z", "--yes")
	require.Equal(t, ExitUsage, past.code)
	require.Contains(t, past.stderr, "is in the past: leave --at out to replay now")
	declined := inboxctl(t, schema, "no\n", "replay", "--all", "--at", "1h")
	require.Equal(t, ExitFailure, declined.code)
	require.Contains(t, declined.stderr, "nothing was scheduled")

	require.Contains(t, inboxctl(t, schema, "", "scheduled", "cancel", "2").ok(t).stdout, "Cancelled scheduled replay 2.")
	again := inboxctl(t, schema, "", "scheduled", "cancel", "2")
	require.Equal(t, ExitFailure, again.code)
	require.Contains(t, again.stderr, "scheduled replay 2 is cancelled")
	require.Equal(t, ExitNotFound, inboxctl(t, schema, "", "scheduled", "cancel", "99").code)
	require.Equal(t, ExitUsage, inboxctl(t, schema, "", "scheduled", "cancel", "two").code)

	// Due now: the maintenance job (here, admin's RunDueReplays, which it
	// calls) replays it once, and scheduled shows what it did.
	inboxctl(t, schema, "", "replay", "--group", failureGroup(t, schema), "--at", "0s", "--yes").ok(t)
	adm, err := admin.New(pgtest.Pool(t), admin.Config{Schema: schema})
	require.NoError(t, err)
	n, err := adm.RunDueReplays(context.Background(), admin.RunDueReplaysOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	list := inboxctl(t, schema, "", "scheduled").ok(t).stdout
	require.Regexp(t, `3\s+\S+ \S+\s+done\s+-\s+2 of 2\s+status=dead,pending group=[0-9a-f]{12}`, list)
}

// failureGroup returns the fixture's two-message gateway-timeout group.
func failureGroup(t *testing.T, schema string) string {
	t.Helper()
	out := inboxctl(t, schema, "", "failures").ok(t).stdout
	return regexp.MustCompile(`2\s+2\s+0\s+payments\s+ChargeCard\s+([0-9a-f]{12})`).FindStringSubmatch(out)[1]
}

// groupsFixture stores dead messages failing the same way for two
// consumers: 5 of payments and 3 of refunds, the last failed attempt of
// each a few minutes ago.
func groupsFixture(t *testing.T) string {
	t.Helper()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               last_error, errors, bucket)
		SELECT c, c || '-' || g, 'ChargeCard', 'dead', 1, 1, '\x00'::bytea, ''::bytea, 'gateway timeout after ' || g || 's',
		       jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - make_interval(mins => g), 'error', 'gateway timeout')),
		       /* schema */inbox_bucket(c || '-' || g)
		FROM (VALUES ('payments', 5), ('refunds', 3)) AS x(c, n), generate_series(1, x.n) AS g`, schema))
	require.NoError(t, err)
	return schema
}

// hintArgs returns the arguments of the command a hint line of out
// prints after label, as an operator would paste it.
func hintArgs(t *testing.T, out, label string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + ` inboxctl (.*)$`).FindStringSubmatch(out)
	require.NotNil(t, m, "no %q hint in:\n%s", label, out)
	return strings.Fields(m[1])
}

// A failure group is the line the operator saw: two consumers failing the
// same way are two lines, each hint pastes as it is (--consumer, --schema)
// and acts on its own line's messages only.
func TestFailureGroupIsTheLineShown(t *testing.T) {
	t.Parallel()
	schema := groupsFixture(t)
	out := inboxctl(t, schema, "", "failures").ok(t).stdout
	lines := regexp.MustCompile(`(?m)^(\d+)\s+\d+\s+\d+\s+(\w+)\s+ChargeCard\s+([0-9a-f]{12})`).FindAllStringSubmatch(out, -1)
	require.Len(t, lines, 2, out)
	require.Equal(t, []string{"5", "payments"}, lines[0][1:3])
	require.Equal(t, []string{"3", "refunds"}, lines[1][1:3])
	require.NotEqual(t, lines[0][3], lines[1][3], "one fingerprint per line")

	dry := inboxctl(t, schema, "", "replay", "--group", lines[1][3], "--dry-run").ok(t).stdout
	require.Contains(t, dry, "Would replay 3 messages", "refunds' line showed 3")
	require.NotContains(t, dry, "payments-")

	replay := hintArgs(t, out, "Replay a group:")
	require.Equal(t, []string{"replay", "--group", lines[0][3], "--consumer", "payments", "--schema", schema}, replay)
	env := map[string]string{"DATABASE_URL": pgtest.URL(t)}
	require.Contains(t, inboxctlEnv(t, env, "", append(replay, "--dry-run")...).ok(t).stdout, "Would replay 5 messages")
	require.Contains(t, inboxctlEnv(t, env, "", hintArgs(t, out, "List a group:")...).ok(t).stdout, "payments-5")
	require.Contains(t, inboxctlEnv(t, env, "", hintArgs(t, out, "See one:")...).ok(t).stdout, "Consumer  payments")
}

// A malformed fingerprint is a usage error naming the form; one that no
// message ever had is not found, with the command that lists the groups;
// a group that was drained has simply nothing left to replay.
func TestReplayGroupMalformedUnknownOrDrained(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	for _, args := range [][]string{
		{"replay", "--group", "F2946CD7C667", "--dry-run"},
		{"discard", "--group", "f2946cd7", "--reason", "x"},
		{"list", "--group", "order-2/placed"},
	} {
		r := inboxctl(t, schema, "", args...)
		require.Equal(t, ExitUsage, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "expected 12 lower-case hex digits, such as 3f2a9c1d0b7e", args)
	}

	for _, args := range [][]string{
		{"replay", "--group", "0123456789ab", "--dry-run"},
		{"replay", "--group", "0123456789ab", "--yes"},
		{"discard", "--group", "0123456789ab", "--reason", "x", "--yes"},
	} {
		r := inboxctl(t, schema, "", args...)
		require.Equal(t, ExitNotFound, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "no message in schema "+schema+" ever failed in group 0123456789ab", args)
		require.Contains(t, r.stderr, "'inboxctl failures --schema "+schema+"' lists the groups", args)
	}

	group := failureGroup(t, schema)
	inboxctl(t, schema, "", "replay", "--group", group, "--yes").ok(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(
		"UPDATE /* schema */inbox SET status = 'done', processed_at = now() WHERE status = 'pending' AND replays > 0", schema))
	require.NoError(t, err)
	drained := inboxctl(t, schema, "", "replay", "--group", group, "--dry-run").ok(t)
	require.Equal(t, "Nothing to replay: no eligible message matches.\n", drained.stdout)
}

// failures --since keeps the groups still failing and counts their
// failed attempts in the window; --trend draws them per bucket.
func TestFailuresSinceAndTrend(t *testing.T) {
	t.Parallel()
	schema := groupsFixture(t)
	old := fixture(t)
	require.Equal(t, "No dead or failing message failed in the last 1h.\n", inboxctl(t, old, "", "failures", "--since", "1h").ok(t).stdout)
	require.Contains(t, inboxctl(t, old, "", "failures").ok(t).stdout, "payments", "without --since, old groups are listed")

	since := inboxctl(t, schema, "", "failures", "--since", "4m", "--consumer", "payments").ok(t).stdout
	require.Regexp(t, `(?m)^COUNT .* LAST FAILURE\s+IN 4M\s+ERROR$`, since)
	require.Regexp(t, `(?m)^5\s+5\s+0\s+payments .* [0-9:]+\s+3\s+gateway timeout`, since, "attempts 1, 2 and 3 minutes ago")

	trend := inboxctl(t, schema, "", "failures", "--trend", "--since", "10m", "--buckets", "5").ok(t).stdout
	require.Regexp(t, `(?m)^5\s+5\s+0\s+payments .*\s+5\s+··[▁-█]{3}\s+gateway`, trend, "5 attempts, 1 to 5 minutes ago, in 2-minute buckets")
	require.Contains(t, trend, "TREND: failed attempts per 2m over the last 10m, oldest first (· none).")

	js := inboxctl(t, schema, "", "failures", "--trend", "--buckets", "3", "-o", "json").ok(t).stdout
	require.Contains(t, js, `"failures_in_window": 5`)
	require.Contains(t, js, `"bucket_seconds": 1200`)
	require.Contains(t, js, `"first_failed_at"`)

	for _, args := range [][]string{
		{"failures", "--since", "soon"},
		{"failures", "--since", "0s"},
		{"failures", "--trend", "--buckets", "0"},
	} {
		r := inboxctl(t, schema, "", args...)
		require.Equal(t, ExitUsage, r.code, "%v: %s", args, r.stderr)
	}
}

// On an analyzed inbox stats estimates done messages, says so, and counts
// them with --exact.
func TestStatsDoneEstimate(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render("ANALYZE /* schema */inbox", schema))
	require.NoError(t, err)

	out := inboxctl(t, schema, "", "stats").ok(t).stdout
	require.Regexp(t, `(?m)^payments(\s+\S+){7}\s+≈1\s`, out)
	require.Contains(t, out, "≈ DONE is estimated from PostgreSQL's statistics of the inbox: 'inboxctl stats --exact --schema "+schema+"' counts every done row.")
	require.Contains(t, inboxctl(t, schema, "", "stats", "-o", "json").ok(t).stdout, `"done_estimated": true`)

	exact := inboxctl(t, schema, "", "stats", "--exact").ok(t).stdout
	require.NotContains(t, exact, "≈")
	require.Contains(t, inboxctl(t, schema, "", "stats", "--exact", "-o", "json").ok(t).stdout, `"done_estimated": false`)
}

// show cuts a large payload to a screenful, says how much it cut and how
// to see it all; --full prints it all, -o json always has it.
func TestShowCutsALargePayload(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, bucket)
		VALUES ('payments', 'big-binary', 'Blob', 'dead', 1, 1, '\x00', decode(repeat('00ff', 51200), 'hex'), /* schema */inbox_bucket('big-binary')),
		       ('payments', 'big-text', 'Note', 'dead', 1, 1, '\x00', convert_to(repeat('word ', 2000), 'UTF8'), /* schema */inbox_bucket('big-text'));
		INSERT INTO /* schema */outbox (id, topic, event_type, status, payload, bucket)
		VALUES ('019a0000-0000-7000-8000-0000000000b1', 'orders', 'Blob', 'dead', decode(repeat('00ff', 51200), 'hex'),
		        /* schema */outbox_bucket('019a0000-0000-7000-8000-0000000000b1'))`, schema))
	require.NoError(t, err)

	binary := inboxctl(t, schema, "", "show", "big-binary").ok(t).stdout
	require.Contains(t, binary, "Payload (binary, hex, 102400 bytes)")
	require.Less(t, strings.Count(binary, "\n"), 80, "a screenful, not 6,400 lines of hex")
	require.Contains(t, binary, "  (cut: the first 50 of 6,400 lines shown; all of it: inboxctl show big-binary --consumer payments --full --schema "+schema+")\n")
	require.Contains(t, binary, "\nHistory (0)", "what follows the payload is still shown")
	full := inboxctl(t, schema, "", "show", "big-binary", "--full").ok(t).stdout
	require.Greater(t, strings.Count(full, "\n"), 6400)
	require.NotContains(t, full, "(cut:")

	text := inboxctl(t, schema, "", "show", "big-text").ok(t).stdout
	require.Contains(t, text, "  (cut: the first 4,000 of 10,000 characters shown; all of it: inboxctl show big-text --consumer payments --full")
	require.Less(t, len(text), 5000)

	outbox := inboxctl(t, schema, "", "outbox", "show", "019a0000-0000-7000-8000-0000000000b1").ok(t).stdout
	require.Contains(t, outbox, "(cut: the first 50 of 6,400 lines shown; all of it: inboxctl outbox show 019a0000-0000-7000-8000-0000000000b1 --full")
	require.Greater(t, strings.Count(inboxctl(t, schema, "", "outbox", "show", "019a0000-0000-7000-8000-0000000000b1", "--full").ok(t).stdout, "\n"), 6400)
}

// With more dead messages than failures reads, the counts are marked ≥, a
// line says why and gives the command that counts them all; --exact does,
// and JSON marks the groups "partial".
func TestFailuresPartial(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               last_error, errors, bucket)
		SELECT 'payments', 'flood-' || g, 'ChargeCard', 'dead', 3, 3, '\x00'::bytea, ''::bytea,
		       'gateway timeout after ' || g || 's', jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', 'timeout')),
		       /* schema */inbox_bucket('flood-' || g)
		FROM generate_series(1, $1::int) AS g`, schema), admin.FailuresReadDefault)
	require.NoError(t, err)

	out := inboxctl(t, schema, "", "failures").ok(t).stdout
	require.Regexp(t, `(?m)^≥2,000\s+≥2,000\s+≥0\s+payments\s+ChargeCard\s`, out)
	require.NotContains(t, out, "card declined", "the fixture's older groups are not among the newest 2,000")
	require.Contains(t, out, "≥ More than 2,000 dead and failing messages: the groups are counted from the newest 2,000, so a count\n"+
		"is at least what it says and a group with none of them is missing. Count them all (seconds at a million): "+
		"inboxctl failures --exact --schema "+schema+"\n")
	require.Contains(t, inboxctl(t, schema, "", "failures", "-o", "json").ok(t).stdout, `"partial": true`)
	trend := inboxctl(t, schema, "", "failures", "--trend", "--since", "2d", "--buckets", "4").ok(t).stdout
	require.Contains(t, trend, "Count them all (seconds at a million): inboxctl failures --exact --since 2d --trend --buckets 4 --schema "+schema+"\n",
		"the command that counts them all is the one run, exact")

	exact := inboxctl(t, schema, "", "failures", "--exact").ok(t).stdout
	require.Regexp(t, `(?m)^2,000\s+2,000\s+0\s+payments\s+ChargeCard\s`, exact)
	require.Contains(t, exact, "card declined")
	require.NotContains(t, exact, "≥")
	require.NotContains(t, inboxctl(t, schema, "", "failures", "--exact", "-o", "json").ok(t).stdout, `"partial"`)
}
