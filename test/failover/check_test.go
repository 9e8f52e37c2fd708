package failover

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

var flagReport = flag.String("failover.report", "", "append each run's figures (markdown) to this file")

// counts is what the checker finds on the new primary: it trusts no
// counter of pgbox's, only rows and what the clients were told.
type counts struct {
	acked, ackedLost                       int // orders the producer saw committed; of which not on the new primary
	outboxRows, published, accepted, lost  int // messages written, published, in the inbox, never in the inbox
	appliedOnce, unapplied, duplicated     int // orders by in-transaction effects: one, none, more
	called, uncalled, recalled, keysVaried int // orders by outside calls: some, none, more than one, under several keys
	answered, chargesLost, chargesTwice    int // HTTP requests answered 2xx; of which with no charge; with more than one
	refused                                int // HTTP answers other than 2xx, retried by the client
	retried                                int // inbox messages tried more than once (attempts > 1)
	charged                                int // inbox messages with a failed attempt in their history, other than an expired lease
	leaseExpired                           int // inbox messages whose leased attempt's lease ran out
}

// check counts what the run did and fails the test on anything lost or
// done twice. A planned switchover (planned) must also cost the clients
// nothing: no HTTP answer other than 2xx, and no inbox message charged a
// failed attempt (pgbox waits out the outage and gives back the attempts
// it cut). One thing is still charged, by design: a leased attempt whose
// lease ran out while its process could not reach the database is rescued
// as a crashed worker's is (the two cannot be told apart), with "lease
// expired" in its history. The test's lease (5 s) is shorter than a
// switchover, so that happens here; it is counted and reported.
func (l *load) check(t *testing.T, name string, planned bool, promoted time.Time, pauses map[string]time.Duration) {
	ctx := context.Background()
	l.mu.Lock()
	acked, answered, refused, faultAt := l.acked, l.answered, l.refused, l.faultAt
	l.mu.Unlock()
	c := counts{acked: len(acked), answered: len(answered), refused: refused}
	c.ackedLost = l.count("SELECT count(*) FROM unnest($1::int[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM /* schema */orders AS o WHERE o.id = a.id)", acked)
	c.outboxRows = l.count("SELECT count(*) FROM /* schema */outbox")
	c.published = l.count("SELECT count(*) FROM /* schema */outbox WHERE status = 'published'")
	c.accepted = l.count("SELECT count(*) FROM /* schema */outbox AS o JOIN /* schema */inbox AS i ON i.consumer = $1 AND i.message_id = o.id::text", consumerName)
	c.retried = l.count("SELECT count(*) FROM /* schema */inbox WHERE attempts > 1")
	c.charged = l.count(`SELECT count(*) FROM /* schema */inbox AS i
		WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(i.errors) AS e WHERE e->>'error' NOT LIKE 'lease expired%')`)
	c.leaseExpired = l.count(`SELECT count(*) FROM /* schema */inbox AS i
		WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(i.errors) AS e WHERE e->>'error' LIKE 'lease expired%')`)
	c.lost = l.count("SELECT count(*) FROM /* schema */outbox AS o WHERE NOT EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE i.consumer = $1 AND i.message_id = o.id::text)", consumerName)
	require.NoError(t, l.pool.QueryRow(ctx, l.sql(`
		SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n IS NULL), count(*) FILTER (WHERE n > 1)
		FROM /* schema */orders AS o LEFT JOIN (SELECT order_id, count(*) AS n FROM /* schema */effects GROUP BY 1) AS e ON e.order_id = o.id`)).
		Scan(&c.appliedOnce, &c.unapplied, &c.duplicated))
	require.NoError(t, l.pool.QueryRow(ctx, l.sql(`
		SELECT count(*) FILTER (WHERE n >= 1), count(*) FILTER (WHERE n IS NULL), count(*) FILTER (WHERE n > 1), count(*) FILTER (WHERE keys > 1)
		FROM /* schema */orders AS o
		LEFT JOIN (SELECT order_id, count(*) AS n, count(DISTINCT idempotency_key) AS keys FROM /* schema */emails GROUP BY 1) AS e ON e.order_id = o.id`)).
		Scan(&c.called, &c.uncalled, &c.recalled, &c.keysVaried))
	require.NoError(t, l.pool.QueryRow(ctx, l.sql(`
		SELECT count(*) FILTER (WHERE n IS NULL), count(*) FILTER (WHERE n > 1)
		FROM unnest($1::text[]) AS a(key) LEFT JOIN (SELECT idempotency_key, count(*) AS n FROM /* schema */charges GROUP BY 1) AS c ON c.idempotency_key = a.key`),
		answered).Scan(&c.chargesLost, &c.chargesTwice))

	report := c.markdown(name, promoted.Sub(faultAt), pauses)
	t.Log("\n" + report)
	if *flagReport != "" {
		file, err := os.OpenFile(*flagReport, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		_, err = file.WriteString(report + "\n")
		require.NoError(t, errors.Join(err, file.Close()))
	}
	require.Positive(t, c.acked)
	require.Zero(t, c.ackedLost, "orders the producer saw committed are lost")
	require.Equal(t, 2*l.count("SELECT count(*) FROM /* schema */orders"), c.outboxRows, "two messages per order")
	require.Equal(t, c.outboxRows, c.published, "every outbox row is published")
	require.Zero(t, c.lost, "messages never received")
	require.Equal(t, c.outboxRows, c.accepted)
	require.Zero(t, c.unapplied, "orders whose in-transaction effect never happened")
	require.Zero(t, c.duplicated, "orders whose in-transaction effect happened twice")
	require.Zero(t, c.uncalled, "orders whose outside call was never made")
	require.Zero(t, c.keysVaried, "an outside call repeated under another idempotency key")
	require.Positive(t, c.answered)
	require.Zero(t, c.chargesLost, "requests answered 2xx whose charge is lost")
	require.Zero(t, c.chargesTwice, "requests charged twice")
	if c.charged > 0 {
		t.Logf("the charged messages' histories:\n%s", l.histories())
	}
	if planned {
		require.Zero(t, c.refused, "HTTP answers other than 2xx in a switchover")
		require.Zero(t, c.charged, "inbox messages charged a failed attempt by a switchover")
		require.LessOrEqual(t, c.retried, c.leaseExpired, "inbox messages whose attempts a switchover counted, other than by an expired lease")
	}
}

// histories lists the inbox messages with a failed attempt in their
// history, with it, for a failure message.
func (l *load) histories() string {
	rows, err := l.pool.Query(context.Background(), l.sql(`
		SELECT message_id || ' ' || event_type || ' attempts=' || attempts || ' ' || errors::text
		FROM /* schema */inbox WHERE last_error IS NOT NULL OR jsonb_array_length(errors) > 0 LIMIT 20`))
	if err != nil {
		return err.Error()
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return strings.Join(lines, "\n")
}

// markdown renders the counts and each component's longest pause as
// tables.
func (c counts) markdown(name string, promotion time.Duration, pauses map[string]time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Failover run: %s\n\n", name)
	fmt.Fprintf(&b, "A new primary took writes %s after the fault began.\n\n", promotion.Round(10*time.Millisecond))
	fmt.Fprintln(&b, "| component | longest pause from the fault on |")
	fmt.Fprintln(&b, "|---|---:|")
	for _, comp := range components {
		if p, ok := pauses[comp]; ok {
			fmt.Fprintf(&b, "| %s | %s |\n", comp, p.Round(10*time.Millisecond))
		} else {
			fmt.Fprintf(&b, "| %s | never worked again |\n", comp)
		}
	}
	fmt.Fprintln(&b, "\n| checked on the new primary | count |")
	fmt.Fprintln(&b, "|---|---:|")
	row := func(k string, v int) { fmt.Fprintf(&b, "| %s | %d |\n", k, v) }
	row("orders the producer saw committed", c.acked)
	row("… **lost** (not on the new primary): must be 0", c.ackedLost)
	row("outbox messages (2 per order)", c.outboxRows)
	row("published", c.published)
	row("accepted into the inbox (distinct)", c.accepted)
	row("**lost** (never received): must be 0", c.lost)
	row("inbox messages tried more than once (attempts > 1)", c.retried)
	row("inbox messages charged a failed attempt (an error in their history, other than an expired lease)", c.charged)
	row("… leased attempts whose lease (5 s) ran out during the outage (charged, as a crash)", c.leaseExpired)
	row("orders applied exactly once (in-transaction handler)", c.appliedOnce)
	row("**duplicated effects**: must be 0", c.duplicated)
	row("not applied: must be 0", c.unapplied)
	row("outside calls made at least once (leased handler)", c.called)
	row("outside calls made again (allowed: at least once)", c.recalled)
	row("… under differing idempotency keys: must be 0", c.keysVaried)
	row("HTTP requests answered 2xx", c.answered)
	row("… whose charge is **lost**: must be 0", c.chargesLost)
	row("… **charged twice**: must be 0", c.chargesTwice)
	row("HTTP answers other than 2xx, retried with the same key", c.refused)
	return b.String()
}
