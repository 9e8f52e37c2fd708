package cli

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text, ünïcode ✓":   "plain text, ünïcode ✓",
		"clear\x1b[2Jscreen":      `clear\x1b[2Jscreen`,
		"title\x1b]0;pwned\x07":   `title\x1b]0;pwned\a`,
		"csi\u009b2J":             `csi\u009b2J`,
		"cr\rover\nline\ttab":     `cr\rover\nline\ttab`,
		"del\x7f":                 `del\x7f`,
		"bidi \u202eevil":         `bidi \u202eevil`,
		"bad \xff byte":           `bad \xff byte`,
		`back\slash 'quote'`:      `back\slash 'quote'`,
		"line\u2028separator":     `line\u2028separator`,
		"zero width\u200bspace":   "zero width\u200bspace", // shown as is: it moves nothing
		"nul\x00":                 `nul\x00`,
		"keeps the \\x1b letters": "keeps the \\x1b letters",
	} {
		require.Equal(t, want, clean(in), "%q", in)
	}
	require.Equal(t, "line one\n\tline two\\r", cleanBlock("line one\n\tline two\r"))
}

// A table cell is cut after escaping, between two escapes: never in the
// middle of one, which would leave the terminal an unfinished sequence.
func TestCellCutsBetweenEscapes(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("x", 8) + "\x1b]0;title\x07 and more"
	for n := 1; n <= 30; n++ {
		got := cell(s, n)
		require.LessOrEqual(t, utf8.RuneCountInString(got), n, "%d: %q", n, got)
		require.False(t, needsEscape(got, oneLineText), "%d: %q", n, got)
		body := strings.TrimSuffix(got, "…")
		require.True(t, strings.HasPrefix(clean(s), body), "%d: %q is a cut of the escaped text", n, got)
		for _, e := range []string{`\x1b`, `\a`} { // a cut keeps an escape whole or drops it
			if i := strings.Index(clean(s), e); i < len(body) {
				require.GreaterOrEqual(t, len(body), i+len(e), "%d: %q cuts %s", n, got, e)
			}
		}
	}
	require.Equal(t, "first line …", cell("first line\nsecond", 40))
	require.Equal(t, "short", cell("short", 40))
}

// A hint naming an id with a control character shows no control
// character, and pastes into bash as the id.
func TestShellQuotePastesBack(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to paste into")
	}
	for _, s := range []string{"order-17/placed", "with space", "it's", "esc\x1b[2J", "bell\x07 and 'quote' and \\ back",
		"new\nline", "bidi\u202e", "bad\xffbyte", "c1\u009b"} {
		q := shellQuote(s)
		require.False(t, needsEscape(q, oneLineText), "%q quoted as %q", s, q)
		out, err := exec.Command(bash, "-c", "printf %s "+q).Output()
		require.NoError(t, err, q)
		require.Equal(t, s, string(out), "%q quoted as %s", s, q)
	}
}

// hostileSQL holds messages, outbox rows, processes and a leader whose
// texts carry escape sequences: ESC [2J clears the screen, ESC ]0;…BEL
// renames the terminal, U+009B is a one-character CSI, U+202E reverses
// text, CR overwrites a line. The dead message's error puts an OSC
// sequence where a 70-character cell is cut.
const hostileSQL = `
INSERT INTO /* schema */inbox
    (consumer, message_id, event_type, status, attempts, max_attempts, available_at, received_at, ordering_key,
     payload_hash, payload, metadata, last_error, errors, bucket)
VALUES
('payments', E'order-\x1b[2J7', E'Charge\x1b]0;pwned\x07Card', 'dead', 3, 3, '2026-01-01 10:00:00Z', '2026-01-01 10:00:00Z', E'key\x1b[1A',
 '\x00', convert_to(E'{"note": "\u009b31mred\u202e"}', 'UTF8'),
 jsonb_build_object(E'k\x1b[2J', E'v\x1b]0;title\x07', 'bidi', E'abc\u202edcba'),
 'gateway said: ' || repeat('x', 50) || E' \x1b]0;owned-title\x07 and the rest of the error',
 jsonb_build_array(
     jsonb_build_object('attempt', 1, 'at', '2026-01-01T10:00:01Z', 'error', E'boom\x1b[2J\rhidden', 'trace', E'goroutine 1\r\n\x1b[31mred'),
     jsonb_build_object('action', 'replayed', 'at', '2026-01-01T10:30:00Z', 'replay', 1, 'previous_status', 'dead',
                        'previous_attempts', 3, 'note', E'by \x1b]0;x\x07 me'),
     jsonb_build_object('attempt', 1, 'at', '2026-01-01T10:31:00Z', 'error', 'gateway said: ' || repeat('x', 50) || E' \x1b]0;owned-title\x07 and the rest of the error')),
 /* schema */inbox_bucket(E'order-\x1b[2J7')),
(E'ref\x1b[2Junds', 'r-1', E'Refund\u009b2J', 'pending', 1, 25, '2030-01-01 00:00:00Z', '2026-01-01 10:01:00Z', NULL,
 '\x00', convert_to(E'text \u009b2J payload', 'UTF8'), '{}', E'declined\u009b2J',
 jsonb_build_array(jsonb_build_object('attempt', 1, 'at', '2026-01-01T10:01:01Z', 'error', E'declined\u009b2J')),
 /* schema */inbox_bucket('r-1'));

INSERT INTO /* schema */outbox
    (id, topic, event_type, ordering_key, status, attempts, available_at, created_at, payload, metadata, last_error, errors, bucket)
VALUES
('019a0000-0000-7000-8000-0000000000e1', E'orders\x1b[2J', E'Paid\x1b]0;t\x07', E'o\u202ek', 'dead', 3, '2026-01-01 10:01:00Z',
 '2026-01-01 10:01:00Z', '\x1b5b324a', jsonb_build_object(E'm\x1b[2J', E'\x1b]0;t\x07'), E'publish: \x1b[2J refused',
 jsonb_build_array(jsonb_build_object('attempt', 1, 'at', '2026-01-01T10:01:01Z', 'error', E'publish: \x1b[2J refused')),
 /* schema */outbox_bucket('019a0000-0000-7000-8000-0000000000e1'));

INSERT INTO /* schema */processes (id, kind, consumer, name, host, pid, version, river_id, heartbeat_ms, started_at, last_seen_at) VALUES
(1, 'dispatcher', E'ref\x1b[2Junds', E'proc\x1b]0;x\x07', E'host\x1b[2J', 7, 'v0', NULL, 1000, '2026-01-01 09:00:00Z', '2026-01-01 10:00:00Z');

INSERT INTO /* schema */river_leader (leader_id, elected_at, expires_at)
VALUES (E'river\x1b[2J', '2026-01-01 09:00:01Z', '2999-01-01 00:00:00Z');
`

// Every text from the database reaches the terminal escaped, in every
// command and every format: no command prints a control character other
// than a line break (a table's tabs become spaces), and a cut cell never
// swallows what follows it.
func TestDatabaseTextIsEscaped(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(hostileSQL, schema))
	require.NoError(t, err)
	id, consumer := "order-\x1b[2J7", "ref\x1b[2Junds"
	// An audit record and a scheduled replay with texts of their own.
	inboxctl(t, schema, "", "replay", "r-1", "--consumer", consumer, "--at", "2h", "--note", "n\u009b2J", "--as", "bob\x1b[2J", "--yes").ok(t)

	for _, args := range [][]string{
		{"list"}, {"list", "-o", "json"}, {"list", "-o", "jsonl"},
		{"failures"}, {"failures", "-o", "json"}, {"failures", "--trend", "--since", "1000000h"},
		{"show", id, "--consumer", "payments"}, {"show", id, "-o", "json"}, {"show", "r-1"},
		{"outbox", "list"}, {"outbox", "list", "-o", "jsonl"},
		{"outbox", "show", "019a0000-0000-7000-8000-0000000000e1"}, {"outbox", "show", "019a0000-0000-7000-8000-0000000000e1", "-o", "json"},
		{"stats"}, {"stats", "-o", "json"}, {"processes"}, {"processes", "-o", "json"},
		{"audit"}, {"audit", "-o", "json"}, {"scheduled"}, {"scheduled", "-o", "json"},
		{"replay", "--status", "dead", "--dry-run"}, {"discard", "--all", "--reason", "x", "--dry-run", "-o", "jsonl"},
		{"replay", "r-1", id, "--consumer", consumer}, // refused: the error names the ids
		{"show", "nothing", "--consumer", consumer},
	} {
		r := inboxctl(t, schema, "", args...)
		require.NotEqual(t, ExitUsage, r.code, "%q: %s", args, r.stderr)
		requireNoControl(t, fmt.Sprintf("%q stdout", args), r.stdout)
		requireNoControl(t, fmt.Sprintf("%q stderr", args), r.stderr)
	}

	list := inboxctl(t, schema, "", "list").ok(t).stdout
	require.Contains(t, list, `order-\x1b[2J7`, "the id, shown escaped")
	require.Contains(t, list, `Charge\x1b]0;pwned\aCard`)

	failures := inboxctl(t, schema, "", "failures").ok(t).stdout
	require.Contains(t, failures, `gateway said: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx \x1b…`, "cut after a whole escape")
	require.Contains(t, failures, `See one: inboxctl show $'order-\x1b[2J7' --consumer payments`, "the hints are there, and paste")

	show := inboxctl(t, schema, "", "show", id, "--consumer", "payments").ok(t).stdout
	for _, want := range []string{
		`ID            order-\x1b[2J7`, `Ordering key  key\x1b[1A`, `k\x1b[2J: v\x1b]0;title\a`, `bidi: abc\u202edcba`,
		`"note": "\u009b31mred\u202e"`, `attempt 1 failed: boom\x1b[2J\rhidden`, `goroutine 1\r`, `\x1b[31mred`,
		`(replay 1; was dead after 3 attempts): by \x1b]0;x\a me`,
	} {
		require.Contains(t, show, want)
	}
	outbox := inboxctl(t, schema, "", "outbox", "show", "019a0000-0000-7000-8000-0000000000e1").ok(t).stdout
	require.Contains(t, outbox, `Topic         orders\x1b[2J`)
	require.Contains(t, outbox, `|.[2J|`, "a binary payload is a hex dump")
	require.Contains(t, inboxctl(t, schema, "", "processes").ok(t).stdout, `- dispatcher proc\x1b]0;x\a, host host\x1b[2J pid 7`)
}

// requireNoControl fails if s holds a character a terminal acts on, other
// than a line break, or a byte that is not UTF-8.
func requireNoControl(t *testing.T, what, s string) {
	t.Helper()
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				t.Fatalf("%s: a byte that is not UTF-8 at %d: %q", what, i, s[max(0, i-40):min(len(s), i+40)])
			}
		}
		if r != '\n' && acts(r, oneLineText) {
			t.Fatalf("%s: control character %U at %d: %q", what, r, i, s[max(0, i-40):min(len(s), i+40)])
		}
	}
}
