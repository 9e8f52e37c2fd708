package chaos

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
)

// brokerOutage is one stretch of the driver's schedule during which the
// broker was down.
type brokerOutage struct {
	from   time.Time // just before the driver killed the server
	to     time.Time // once the restarted server answered
	relays []*child  // the relays running through it (none is killed while the broker is down)
}

// outageGrace extends an outage past the broker's return: a relay round
// that began while the broker was down may end, and report it or record
// what it charged, up to a lease later.
const outageGrace = relayLease

// window is when a relay may report the outage, and when a row charged an
// attempt for a publish failure was charged for the outage.
func (o brokerOutage) window() (from, to time.Time) { return o.from, o.to.Add(outageGrace) }

// outageReports are the messages, logged at level Error, by which a relay
// says that it waits on its broker: the outage itself (relay/outage.go),
// or the stall watchdog's verdict that due rows make no progress.
var outageReports = []string{"relay: the broker is unreachable", "relay: no progress"}

// reportedOutage reports whether relay c logged, within o's window, that
// it paused for the broker or made no progress.
func reportedOutage(t *testing.T, c *child, o brokerOutage) bool {
	for _, l := range logDuring(t, c, o) {
		_, level, msg, _ := parseLogLine(l)
		for _, prefix := range outageReports {
			if level == "ERROR" && strings.HasPrefix(msg, prefix) {
				return true
			}
		}
	}
	return false
}

// logDuring returns the lines relay c logged within o's window.
func logDuring(t *testing.T, c *child, o brokerOutage) []string {
	file, err := os.Open(c.log)
	require.NoError(t, err)
	defer file.Close()
	from, to := o.window()
	from = from.Truncate(time.Millisecond) // a log's time is cut to milliseconds
	var lines []string
	sc := bufio.NewScanner(file)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if at, _, _, ok := parseLogLine(sc.Text()); ok && !at.Before(from) && !at.After(to) {
			lines = append(lines, sc.Text())
		}
	}
	require.NoError(t, sc.Err())
	return lines
}

// silentRelay describes a relay that did not report outage o: what it
// logged during the outage, and the end of its log.
func silentRelay(t *testing.T, c *child, o brokerOutage) string {
	from, to := o.window()
	return fmt.Sprintf("--- %s logged from %s to %s (the outage and its grace):\n%s%s",
		c.name, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), lastLines(strings.Join(logDuring(t, c, o), "\n"), logTailLines), c.tail())
}

// parseLogLine reads the time, level and message of a line that
// slog.TextHandler wrote: time=… level=… msg=… followed by attributes.
func parseLogLine(line string) (at time.Time, level, msg string, ok bool) {
	rest, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return at, "", "", false
	}
	stamp, rest, _ := strings.Cut(rest, " ")
	at, err := time.Parse(time.RFC3339, stamp)
	if err != nil {
		return at, "", "", false
	}
	if rest, ok = strings.CutPrefix(rest, "level="); !ok {
		return at, "", "", false
	}
	level, rest, _ = strings.Cut(rest, " ")
	if rest, ok = strings.CutPrefix(rest, "msg="); !ok {
		return at, "", "", false
	}
	if quoted, err := strconv.QuotedPrefix(rest); err == nil {
		msg, err = strconv.Unquote(quoted)
		return at, level, msg, err == nil
	}
	msg, _, _ = strings.Cut(rest, " ")
	return at, level, msg, true
}

// maxChargedShown is how many charged attempts a failure lists.
const maxChargedShown = 20

// chargedDuringOutages counts the publish attempts charged to outbox rows
// during the outages, from the rows' own histories: every failed publish
// that charges its row an attempt appends to the row's errors an entry
// {attempt, at, error} whose error starts "publish: " (relay/batch.go
// failed), while a refunded attempt appends nothing, and a lease that
// expired (a relay killed mid-round) appends an error of its own wording.
// It also returns the first maxChargedShown of them, one per line, and
// how many publish attempts were charged in the whole run.
func chargedDuringOutages(t *testing.T, pool *pgxpool.Pool, outages []brokerOutage) (n int, list string, total int) {
	total = scalar(t, pool, ident.Render(`SELECT count(*) FROM /* schema */outbox AS o, jsonb_array_elements(o.errors) AS e
		WHERE e->>'error' LIKE 'publish: %'`, producerSchema))
	var b strings.Builder
	q := ident.Render(`
		SELECT e->>'at', o.id::text, coalesce(e->>'attempt', ''), o.attempts, o.status::text, e->>'error'
		FROM /* schema */outbox AS o, jsonb_array_elements(o.errors) AS e
		WHERE e->>'error' LIKE 'publish: %' AND (e->>'at')::timestamptz BETWEEN $1 AND $2
		ORDER BY (e->>'at')::timestamptz`, producerSchema)
	for _, o := range outages {
		from, to := o.window()
		rows, err := pool.Query(context.Background(), q, from, to)
		require.NoError(t, err)
		for rows.Next() {
			var (
				at, id, attempt, status, msg string
				attempts                     int
			)
			require.NoError(t, rows.Scan(&at, &id, &attempt, &attempts, &status, &msg))
			if n++; n <= maxChargedShown {
				fmt.Fprintf(&b, "%s row %s attempt %s (attempts now %d, %s): %s\n", at, id, attempt, attempts, status, msg)
			}
		}
		require.NoError(t, rows.Err())
	}
	return n, b.String(), total
}

// The driver reads the children's logs as slog.TextHandler writes them.
func TestParseLogLine(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	logger := slog.New(slog.NewTextHandler(&b, nil))
	before := time.Now().Truncate(time.Millisecond)
	logger.Error(outageReports[0]+`; "quoted", and more`, slog.String("error", "dial tcp: refused"))
	logger.Warn("bare", slog.Int("n", 1))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2)

	at, level, msg, ok := parseLogLine(lines[0])
	require.True(t, ok, lines[0])
	require.Equal(t, "ERROR", level)
	require.Equal(t, outageReports[0]+`; "quoted", and more`, msg)
	require.False(t, at.Before(before), "logged at %s, before %s", at, before)
	require.False(t, at.After(time.Now()))

	_, level, msg, ok = parseLogLine(lines[1])
	require.True(t, ok, lines[1])
	require.Equal(t, "WARN", level)
	require.Equal(t, "bare", msg)

	_, _, _, ok = parseLogLine("panic: not a log line")
	require.False(t, ok)
}
