package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// resumeHint finds the resume command line printed after "Resume: " for
// a pause of what, and returns its arguments as a shell would split them
// (without "inboxctl").
func resumeHint(t *testing.T, out, what string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?s)` + regexp.QuoteMeta(what) + `.*?Resume: inboxctl ([^\n]+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "no resume hint for %s in:\n%s", what, out)
	args, err := splitArgs(m[1])
	require.NoError(t, err)
	return args
}

// pause, pauses and resume, as an operator uses them: a whole-consumer
// pause and an event type's side by side, each listed with who, why and
// since when, each lifted by the hint printed, the event type's left in
// place by the consumer's resume, every step in the audit log.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	schema := fixture(t)

	r := inboxctl(t, schema, "", "pause", "payments", "--reason", "gateway down, OPS-7", "--as", "alice").ok(t)
	require.Contains(t, r.stdout, "Paused consumer payments (every event type): its dispatchers, in every process, stop claiming within a poll interval. "+
		"Messages keep arriving and wait.\nResume: inboxctl resume payments --schema "+schema+"\n")
	r = inboxctl(t, schema, "", "pause", "payments", "--type", "ChargeCard", "--reason", "card bug", "--as", "bob").ok(t)
	require.Contains(t, r.stdout, "Paused event type ChargeCard of consumer payments: ")
	require.Regexp(t, `Also paused: consumer payments \(every event type\), by alice since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \([^)]+\): "gateway down, OPS-7"\.`, r.stdout)
	typeHint := resumeHint(t, r.stdout, "Paused event type ChargeCard")
	require.Equal(t, []string{"resume", "payments", "--event-type", "ChargeCard", "--schema", schema}, typeHint)

	list := inboxctl(t, schema, "", "pauses").ok(t).stdout
	require.Regexp(t, `(?m)^CONSUMER +EVENT TYPE +PAUSED SINCE \(UTC\) +FOR +BY +REASON$`, list)
	require.Regexp(t, `(?m)^payments +\(every\) +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +\S+ +alice +gateway down, OPS-7$`, list)
	require.Regexp(t, `(?m)^payments +ChargeCard +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +\S+ +bob +card bug$`, list)
	var pauses []admin.Pause
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "pauses", "-o", "json").ok(t).stdout), &pauses))
	require.Len(t, pauses, 2)
	require.Equal(t, "alice", pauses[0].PausedBy)
	require.NotZero(t, pauses[0].AuditID)
	jsonl := inboxctl(t, schema, "", "pauses", "--consumer", "shipping", "-o", "jsonl").ok(t).stdout
	require.Empty(t, jsonl, "shipping has no pause")
	require.Equal(t, "Nothing is paused.\n", inboxctl(t, schema, "", "pauses", "--consumer", "shipping").ok(t).stdout)

	// The consumer's resume leaves its event type paused, and says so
	// with the command that lifts it.
	r = inboxctl(t, schema, "", "resume", "payments", "--as", "carol", "--note", "gateway back").ok(t)
	require.Regexp(t, `^Resumed consumer payments, paused by alice since .* UTC \([^)]+\): "gateway down, OPS-7"\.\n`+
		`Its dispatchers claim again within a poll interval, in order\.\n`+
		`Still paused: event type ChargeCard of consumer payments, by bob since .*: "card bug"\. Resume: inboxctl resume payments --event-type ChargeCard --schema `+schema+`\n$`, r.stdout)
	require.Equal(t, typeHint, resumeHint(t, r.stdout, "Still paused: event type ChargeCard"))

	// Resuming what is not paused is nothing to do, as a script expects.
	r = inboxctl(t, schema, "", "resume", "payments").ok(t)
	require.True(t, strings.HasPrefix(r.stdout, "Nothing to resume: consumer payments is not paused.\nStill paused: event type ChargeCard"), r.stdout)
	var report resumeReport
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "resume", "payments", "-o", "json").ok(t).stdout), &report))
	require.Nil(t, report.Resumed)
	require.Len(t, report.StillPaused, 1)

	// The hint pastes as printed.
	r = inboxctl(t, schema, "", typeHint[:len(typeHint)-2]...).ok(t)
	require.Equal(t, r.stdout, strings.SplitN(r.stdout, "\n", 3)[0]+"\nIts dispatchers claim again within a poll interval, in order.\n", "nothing is left paused")
	require.Contains(t, r.stdout, "Resumed event type ChargeCard of consumer payments, paused by bob")
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "resume", "payments", "--event-type", "ChargeCard", "-o", "json").ok(t).stdout), &report))
	require.Equal(t, resumeReport{StillPaused: []admin.Pause{}}, report)
	require.Equal(t, "Nothing is paused.\n", inboxctl(t, schema, "", "pauses").ok(t).stdout)

	audit := inboxctl(t, schema, "", "audit", "-o", "json").ok(t).stdout
	var records []struct {
		Action    string            `json:"action"`
		Actor     admin.Actor       `json:"actor"`
		Selection map[string]string `json:"selection"`
	}
	require.NoError(t, json.Unmarshal([]byte(audit), &records))
	var actions []string
	for _, rec := range records {
		actions = append(actions, rec.Action+" "+rec.Actor.Name+" "+rec.Selection["consumer"]+" "+rec.Selection["event_type"])
	}
	require.Len(t, actions, 4, "two pauses, two resumes; the resumes of nothing are not recorded")
	require.Contains(t, actions, "resume carol payments ")
	require.Contains(t, actions, "pause bob payments ChargeCard")
}

// What pause refuses: a second pause of what is paused (exit 1, saying
// whose it is), an unknown consumer or event type (exit 3, with the known
// ones; --force pauses it anyway), no reason (exit 2). Nothing is changed.
func TestPauseRefusals(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	inboxctl(t, schema, "", "pause", "payments", "--reason", "gateway down", "--as", "alice").ok(t)

	r := inboxctl(t, schema, "", "pause", "payments", "--reason", "mine now", "--as", "bob")
	require.Equal(t, ExitFailure, r.code)
	require.Regexp(t, `^inboxctl: consumer "payments" is already paused by alice since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(reason: "gateway down"\); `+
		`nothing was changed: resume it first to pause it anew: inboxctl resume payments --schema `+schema+`\n$`, r.stderr)

	r = inboxctl(t, schema, "", "pause", "paymnts", "--reason", "x")
	require.Equal(t, ExitNotFound, r.code)
	require.Contains(t, r.stderr, `consumer "paymnts" is unknown: the inbox holds no message of it, no dispatcher of it is registered, and it was never paused `+
		`(known consumers: "payments", "shipping"); nothing was changed: check the name, or force the pause`)
	r = inboxctl(t, schema, "", "pause", "shipping", "--event-type", "LabelPrnted", "--reason", "x")
	require.Equal(t, ExitNotFound, r.code)
	require.Contains(t, r.stderr, `(known event types: "LabelPrinted", "OrderPlaced")`)

	r = inboxctl(t, schema, "", "pause", "payments", "--event-type", "ChargeCard")
	require.Equal(t, ExitUsage, r.code)
	require.Contains(t, r.stderr, "inboxctl: --reason is required: say why, for whoever finds payments paused\n")

	var pauses []admin.Pause
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "pauses", "-o", "json").ok(t).stdout), &pauses))
	require.Len(t, pauses, 1, "nothing refused was changed")
	require.Equal(t, "gateway down", pauses[0].Reason)

	// --force pauses a name pgbox has not seen; the names pgbox shows are
	// escaped, and the hint pastes back as the name.
	r = inboxctl(t, schema, "", "pause", "refunds\x1b[2J", "--force", "--reason", "before its first deploy\r", "-o", "json").ok(t)
	var p admin.Pause
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p))
	require.Equal(t, "refunds\x1b[2J", p.Consumer)
	list := inboxctl(t, schema, "", "stats").ok(t).stdout
	require.NotContains(t, list, "\x1b")
	require.NotContains(t, list, "\r")
	require.Contains(t, list, `- consumer refunds\x1b[2J (every event type), by `)
	args := resumeHint(t, list, `consumer refunds\x1b[2J`)
	require.Equal(t, "resume", args[0])
	require.Contains(t, list, `Resume: inboxctl resume $'refunds\x1b[2J' --schema `+schema)
}

// stats lists the pauses, in its tables' footer and in JSON; --check
// reports no stall for a consumer paused as a whole (its work waits by
// design), and names the event types paused of one that is stalled.
func TestStatsShowsPauses(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, available_at, payload_hash, payload, bucket)
		VALUES ('payments', 'waiting', 'ChargeCard', 'pending', 0, 3, now() - interval '10 minutes', '\x00', '', /* schema */inbox_bucket('waiting'))`, schema))
	require.NoError(t, err)
	var st struct {
		Check  *checkReport  `json:"check"`
		Pauses []admin.Pause `json:"pauses"`
	}
	require.NoError(t, json.Unmarshal([]byte(inboxctl(t, schema, "", "stats", "-o", "json").ok(t).stdout), &st))
	require.NotNil(t, st.Pauses, `"pauses": [] when nothing is paused`)
	require.Empty(t, st.Pauses)
	require.NotContains(t, inboxctl(t, schema, "", "stats").ok(t).stdout, "Paused")

	inboxctl(t, schema, "", "pause", "payments", "--event-type", "ChargeCard", "--reason", "card bug", "--as", "bob").ok(t)
	r := inboxctl(t, schema, "", "stats", "--check")
	require.Equal(t, ExitCheckFailed, r.code, "an event type's pause leaves the consumer's stall a problem: %s", r.stdout)
	require.Contains(t, r.stdout, "no worker has claimed it (event type ChargeCard paused ('inboxctl pauses --schema "+schema+"' lists the pauses), no dispatcher of payments running")

	inboxctl(t, schema, "", "pause", "payments", "--reason", "gateway down", "--as", "alice").ok(t)
	r = inboxctl(t, schema, "", "stats", "--check").ok(t)
	require.Contains(t, r.stdout, "\nPaused (their messages wait; 'inboxctl pauses --schema "+schema+"' lists the pauses):\n"+
		"- consumer payments (every event type), by alice since ")
	require.Regexp(t, `\n- event type ChargeCard of consumer payments, by bob since .*: "card bug"\. Resume: inboxctl resume payments --event-type ChargeCard --schema `+schema+`\n`, r.stdout)
	require.Contains(t, r.stdout, "\nCheck: OK: ")

	r = inboxctl(t, schema, "", "stats", "--check", "-o", "json").ok(t)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Pauses, 2)
	require.True(t, st.Check.OK)
}

// A misspelt consumer is refused, with the known ones, by every command
// that narrows to a consumer and finds nothing, instead of reading as
// "nothing to do"; a known consumer with nothing to show is no error.
func TestAConsumerNeverSeenIsRefusedAsATypo(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	inboxctl(t, schema, "", "pause", "payments", "--reason", "gateway down").ok(t)
	for _, args := range [][]string{
		{"resume", "paymnts"},
		{"resume", "paymnts", "-o", "json"},
		{"pauses", "--consumer", "paymnts"},
		{"list", "--consumer", "paymnts"},
		{"list", "--consumer", "paymnts", "-o", "json"},
		{"list", "--consumer", "paymnts", "-o", "jsonl"},
		{"failures", "--consumer", "paymnts"},
		{"failures", "--consumer", "paymnts", "-o", "json"},
		{"replay", "--consumer", "paymnts", "--yes"},
		{"replay", "--consumer", "paymnts", "--at", "2h", "--yes"},
		{"discard", "--consumer", "paymnts", "--reason", "x", "--yes"},
		{"purge", "--consumer", "paymnts", "--older-than", "1h", "--yes"},
	} {
		r := inboxctl(t, schema, "", args...)
		require.Equal(t, ExitNotFound, r.code, "%v: stdout %q, stderr %q", args, r.stdout, r.stderr)
		require.Equal(t, `inboxctl: consumer "paymnts" is unknown: the inbox holds no message of it, no dispatcher of it is registered, and it was never paused `+
			`(known consumers: "payments", "shipping"); nothing was changed: check the name`+"\n", r.stderr, "%v", args)
		require.Empty(t, r.stdout, "%v", args)
	}
	require.Contains(t, inboxctl(t, schema, "", "pauses").ok(t).stdout, "gateway down", "the pause stays")

	require.Equal(t, "Nothing to resume: consumer shipping is not paused.\n", inboxctl(t, schema, "", "resume", "shipping").ok(t).stdout)
	require.Equal(t, "Nothing is paused.\n", inboxctl(t, schema, "", "pauses", "--consumer", "shipping").ok(t).stdout)
	require.Contains(t, inboxctl(t, schema, "", "failures", "--consumer", "shipping", "--since", "1m").ok(t).stdout, "No dead or failing message")
	require.Contains(t, inboxctl(t, schema, "", "replay", "--consumer", "shipping", "--type", "nothing", "--yes").ok(t).stdout, "Nothing to replay")
	require.Equal(t, "[]\n", inboxctl(t, schema, "", "scheduled", "-o", "json").ok(t).stdout, "nothing was scheduled")

	// A consumer paused before its first message (--force) is known by its
	// pauses: resuming one of them names the other, still in place; once
	// resumed, its pause in the audit log keeps it known, so a second
	// resume is nothing to do, not a typo.
	inboxctl(t, schema, "", "pause", "newsvc", "--event-type", "Signup", "--reason", "not live yet", "--force").ok(t)
	r := inboxctl(t, schema, "", "resume", "newsvc").ok(t)
	require.Contains(t, r.stdout, "Nothing to resume: consumer newsvc is not paused.\nStill paused: event type Signup of consumer newsvc")
	require.Contains(t, inboxctl(t, schema, "", "pauses", "--consumer", "newsvc").ok(t).stdout, "not live yet")
	inboxctl(t, schema, "", "resume", "newsvc", "--event-type", "Signup").ok(t)
	require.Equal(t, "Nothing to resume: event type Signup of consumer newsvc is not paused.\n",
		inboxctl(t, schema, "", "resume", "newsvc", "--event-type", "Signup").ok(t).stdout)
	require.Equal(t, "Nothing is paused.\n", inboxctl(t, schema, "", "pauses", "--consumer", "newsvc").ok(t).stdout)
}
