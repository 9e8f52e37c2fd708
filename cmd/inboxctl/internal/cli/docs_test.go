package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// After a change to inboxctl's output, rewrite docs/inboxctl.md's samples
// from the binary with (from the repository's root; the database is
// DATABASE_URL's, or make pg-up's cluster, as for every test here):
//
//	go test -count=1 -run '^TestDocs$' ./cmd/inboxctl/internal/cli/ -update-docs
var updateDocs = flag.Bool("update-docs", false, "rewrite docs/inboxctl.md's sample outputs from the current output")

// docsPath is the operator's guide whose samples TestDocs keeps real.
var docsPath = filepath.Join("..", "..", "..", "..", "docs", "inboxctl.md")

// TestDocs checks that every sample output in docs/inboxctl.md is what
// inboxctl prints. A sample is a fenced block right after a marker that
// names the command:
//
//	<!-- sample: inboxctl replay --group {group} --dry-run -->
//	```
//	$ inboxctl replay --group f2946cd7c667 --dry-run
//	Would replay 2 messages. …
//	```
//
// The test fills one schema with fixtureSQL's messages, their times moved
// so that the newest are a few minutes old (a guide that shows ages of 300
// days reads wrong), and runs the marked commands through run in the
// order of the page, as one operator's session: a replay shows in the
// commands after it. Each block is the command line, stdout, stderr, and
// "(exit status N)" when N is not 0. The commands run on the fixture's
// schema unless they name a --schema, and print its name as "pgbox", the
// schema a command without --schema reads. In a marker, {group} stands for
// the fixture's largest failure group's fingerprint, which changes with the
// fingerprinting rules, and {server} for the test server's host and port,
// shown as docsServer (for connection errors a real server gives).
//
// Times, ages, and numbers with a fraction (JSON seconds) change from run to
// run, so they are masked on both sides before comparing (see masked),
// and runs of spaces count as one, as a masked value's width can shift a
// table's columns. A fenced block that begins with "$ inboxctl" must be
// marked. A session the fixture cannot replay (a Ctrl-C, a live
// maintainer's progress, another host's audit records) is a transcript
// whose first line, "# captured …", says where it comes from. With -update-docs the blocks are rewritten as captured,
// unmasked, and a marker without a block gets one.
func TestDocs(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	// Processes for `processes`: the fixture's running message is held by
	// the dead dispatcher payments-2b1d.
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(registeredSQL, schema)+
		ident.Render(`UPDATE /* schema */inbox SET claim_token = (2::bigint << 32) | 7 WHERE status = 'running'`, schema))
	require.NoError(t, err)
	shiftToNow(t, schema)
	// Heartbeats as a running service has them: every 10 seconds, the live
	// processes' last one just now, the dead ones' 47 seconds ago.
	_, err = pgtest.Pool(t).Exec(context.Background(), ident.Render(`UPDATE /* schema */processes SET
		heartbeat_ms = 10000,
		last_seen_at = date_trunc('second', now()) - CASE WHEN heartbeat_ms > 1000 THEN interval '2 seconds' ELSE interval '47 seconds' END`, schema))
	require.NoError(t, err)
	group := regexp.MustCompile(`"fingerprint": "([0-9a-f]+)"`).
		FindStringSubmatch(inboxctl(t, schema, "", "failures", "-o", "json").ok(t).stdout)
	require.NotNil(t, group, "the fixture has failure groups")

	dsn, err := pgx.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	server := fmt.Sprintf("%s:%d", dsn.Host, dsn.Port)

	src, err := os.ReadFile(docsPath)
	require.NoError(t, err)
	lines := strings.Split(string(src), "\n")
	var out []string
	samples := 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out = append(out, line)
		if strings.HasPrefix(line, "```") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "$ inboxctl") {
			t.Errorf("%s:%d: a sample without a marker: put <!-- sample: %s --> above it", docsPath, i+1, strings.TrimPrefix(lines[i+1], "$ "))
		}
		m := marker.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		samples++
		command := strings.NewReplacer("{group}", group[1], "{server}", server).Replace(m[1])
		got := strings.ReplaceAll(sample(t, schema, command), server, docsServer)
		// The block the marker heads: its lines between the fences.
		start, end := i+1, i+1
		if start < len(lines) && lines[start] == "```" {
			for end = start + 1; end < len(lines) && lines[end] != "```"; end++ {
			}
			require.Less(t, end, len(lines), "%s:%d: the sample's block is not closed", docsPath, i+1)
			want := strings.Join(lines[start+1:end], "\n") + "\n"
			if !*updateDocs {
				require.Equal(t, masked(want), masked(got),
					"%s:%d: the sample differs from inboxctl's output (if the change is meant, run go test -run '^TestDocs$' ./cmd/inboxctl/internal/cli/ -update-docs)",
					docsPath, i+1)
			}
			i = end
		} else if !*updateDocs {
			t.Errorf("%s:%d: the marker heads no ``` block: run with -update-docs to add it", docsPath, i+1)
		}
		out = append(out, "```")
		out = append(out, strings.Split(strings.TrimSuffix(got, "\n"), "\n")...)
		out = append(out, "```")
	}
	require.Positive(t, samples, "docs/inboxctl.md has no marked samples")
	if updated := strings.Join(out, "\n"); *updateDocs && updated != string(src) {
		require.NoError(t, os.WriteFile(docsPath, []byte(updated), 0o644))
	}
}

// docsServer is the test server's host and port as the guide shows them.
const docsServer = "127.0.0.1:5432"

// marker matches a sample's marker and captures the command's arguments.
var marker = regexp.MustCompile(`^<!-- sample: inboxctl (.+) -->$`)

// sample runs one documented command line on schema and returns its block:
// the command line, stdout, stderr and the exit status when not 0.
func sample(t *testing.T, schema, command string) string {
	t.Helper()
	args, err := splitArgs(command)
	require.NoError(t, err, command)
	ownSchema := false
	for _, a := range args {
		ownSchema = ownSchema || a == "--schema" || strings.HasPrefix(a, "--schema=")
	}
	if !ownSchema {
		args = append(args, "--schema", schema)
	}
	r := inboxctlEnv(t, map[string]string{"DATABASE_URL": pgtest.URL(t)}, "", args...)
	var b strings.Builder
	fmt.Fprintf(&b, "$ inboxctl %s\n", command)
	for _, s := range []string{r.stdout, r.stderr} {
		if s != "" {
			b.WriteString(strings.TrimSuffix(s, "\n") + "\n")
		}
	}
	if r.code != ExitOK {
		fmt.Fprintf(&b, "(exit status %d)\n", r.code)
	}
	if ownSchema {
		return b.String()
	}
	// The guide's reader works in the default schema, where hints carry
	// no --schema.
	out := strings.ReplaceAll(b.String(), " --schema "+schema, "")
	return strings.ReplaceAll(out, schema, pgbox.DefaultSchema)
}

// splitArgs splits a command line as a POSIX shell would, for the quoting
// the guide uses: single quotes, double quotes (with \" and \\ inside),
// and blanks between words.
func splitArgs(s string) ([]string, error) {
	var (
		args  []string
		word  strings.Builder
		inArg bool
		quote rune
	)
	runes := []rune(s)
	for i := 0; i < len(runes); i++ {
		c := runes[i]
		switch {
		case quote == '\'' && c == '\'', quote == '"' && c == '"':
			quote = 0
		case quote == '"' && c == '\\' && i+1 < len(runes) && (runes[i+1] == '"' || runes[i+1] == '\\'):
			i++
			word.WriteRune(runes[i])
		case quote != 0:
			word.WriteRune(c)
		case c == '\'' || c == '"':
			quote, inArg = c, true
		case c == ' ' || c == '\t':
			if inArg {
				args = append(args, word.String())
				word.Reset()
				inArg = false
			}
		default:
			word.WriteRune(c)
			inArg = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c quote in %q", quote, s)
	}
	if inArg {
		args = append(args, word.String())
	}
	return args, nil
}

// What masked replaces: times (2026-11-22 06:04:25, RFC 3339 with a
// fraction and a zone), ages and durations (45.1s, 1h58m, 326d4h),
// numbers with a fraction (JSON's seconds) and failures --trend's
// sparklines (a failure seconds from a bucket's edge lands on either side,
// as the run takes its time). An error text's "after 29s" is masked too:
// the mask is a little blind so that it never flakes.
var (
	maskSparkline = regexp.MustCompile(`[·▁▂▃▄▅▆▇█]{2,}`)
	maskTime      = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?`)
	maskDuration  = regexp.MustCompile(`\b(\d+(\.\d+)?(d|h|m|s|ms|µs))+\b`)
	maskFraction  = regexp.MustCompile(`\b\d+\.\d+\b`)
	maskSpaces    = regexp.MustCompile(`[ \t]+`)
)

// masked returns a sample with what changes between runs replaced, and
// runs of blanks made one.
func masked(s string) string {
	s = maskSparkline.ReplaceAllString(s, "<trend>")
	s = maskTime.ReplaceAllString(s, "<time>")
	s = maskDuration.ReplaceAllString(s, "<age>")
	s = maskFraction.ReplaceAllString(s, "<n>")
	return maskSpaces.ReplaceAllString(s, " ")
}

// shiftToNow moves every time in schema's tables, and the "at" of every
// entry in an errors history, by one interval, so that fixtureSQL's
// 2026-01-01 12:05:00 becomes now: the guide then shows a recent incident.
// Its far-future times (not yet due) become due in 1h47m.
// It finds the columns by their type, so a column added later moves too,
// and leaves partitions out: their rows move with their table's.
func shiftToNow(t *testing.T, schema string) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var shift string
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT (date_trunc('second', now()) - timestamptz '2026-01-01 12:05:00Z')::text`).Scan(&shift))
	rows, err := pool.Query(ctx, `
		SELECT table_name::text,
		       array_agg(column_name::text ORDER BY column_name) FILTER (WHERE data_type = 'timestamp with time zone'),
		       bool_or(column_name = 'errors' AND data_type = 'jsonb')
		FROM information_schema.columns
		WHERE table_schema = $1::text
		  AND table_name IN (SELECT table_name FROM information_schema.tables WHERE table_schema = $1::text AND table_type = 'BASE TABLE')
		  AND table_name NOT IN (SELECT c.relname FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
		                         WHERE n.nspname = $1::text AND c.relispartition) -- moved with their table
		GROUP BY table_name`, schema)
	require.NoError(t, err)
	type table struct {
		Name    string
		Times   []string
		History bool
	}
	tables, err := pgx.CollectRows(rows, pgx.RowToStructByPos[table])
	require.NoError(t, err)
	for _, tb := range tables {
		var set []string
		for _, c := range tb.Times {
			col := pgx.Identifier{c}.Sanitize()
			// The fixture's "not due" (2030) becomes due within the
			// next two hours, as a reader would expect of a backoff.
			set = append(set, col+" = CASE WHEN "+col+" >= '2030-01-01' THEN date_trunc('second', now()) + interval '1 hour 47 minutes' ELSE "+col+" + $1::interval END")
		}
		if tb.History {
			set = append(set, `errors = (
				SELECT coalesce(jsonb_agg(CASE WHEN e ? 'at'
					THEN jsonb_set(e, '{at}', to_jsonb(to_char(((e->>'at')::timestamptz + $1::interval) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')))
					ELSE e END ORDER BY n), '[]')
				FROM jsonb_array_elements(errors) WITH ORDINALITY AS h(e, n))`)
		}
		if len(set) == 0 {
			continue
		}
		_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, tb.Name}.Sanitize()+" SET "+strings.Join(set, ", "), shift)
		require.NoError(t, err, tb.Name)
	}
}

// docs/inboxctl.md's table of exit codes says what exitCodes says (the
// root command's help), backquotes aside.
func TestExitCodesInDocs(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(docsPath)
	require.NoError(t, err)
	rows := regexp.MustCompile("(?m)^  \\| (\\d+) \\| (.+) \\|$").FindAllStringSubmatch(string(src), -1)
	documented := map[string]string{}
	for _, r := range rows {
		documented[r[1]] = strings.ReplaceAll(r[2], "`", "")
	}
	require.Len(t, documented, len(exitCodes), "one row per exit code")
	for _, c := range exitCodes {
		require.Equal(t, c.meaning, documented[fmt.Sprint(c.code)], "exit code %d", c.code)
	}
}
