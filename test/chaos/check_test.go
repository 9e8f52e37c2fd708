package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
)

// result is what the independent checker finds in the database: it trusts
// no counter of the engine's, only rows.
type result struct {
	committed       int            // orders committed by the producers (the ground truth)
	outboxRows      int            // messages those orders wrote
	outboxPublished int            // of which published
	brokerCopies    int            // messages the broker holds (republished rows count twice)
	accepted        int            // distinct outbox messages the consumer's inbox holds
	lost            int            // outbox messages the inbox never got
	appliedOnce     int            // orders whose in-transaction effect happened exactly once
	unapplied       int            // orders with no in-transaction effect
	duplicated      int            // orders whose in-transaction effect happened more than once
	called          int            // orders whose outside call was made at least once
	uncalled        int            // orders whose outside call was never made
	recalled        int            // orders whose outside call was made again (allowed: at least once)
	keysVaried      int            // orders whose repeated calls carried different idempotency keys
	goodNotDone     int            // messages that should have succeeded but are not done
	poison          int            // poison messages written
	dead            map[string]int // dead messages by type and reason
	badHistory      int            // dead messages whose history does not have one entry per attempt
	timeouts        int            // attempts ended by a statement or lock timeout
	outages         int            // broker outages on the driver's schedule (NATS only)
	outageRelays    int            // relays running while the broker was down, over all outages
	relaysSawOutage int            // of which logged that they paused for it, or made no progress
	silentRelays    []string       // the others, by name
	silentLogs      string         // what they logged (silentRelay)
	outageCharged   int            // publish attempts charged to rows during the outages
	chargedList     string         // the first of them
	charged         int            // publish attempts charged to rows in the whole run
	faults          string
	duration        string
}

func scalar(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), q, args...).Scan(&n), q)
	return n
}

func check(t *testing.T, pool *pgxpool.Pool) *result {
	p, c := ident.Quote(producerSchema), ident.Quote(consumerSchema)
	q := func(s string) string { return strings.NewReplacer("{p}", p, "{c}", c).Replace(s) }
	r := &result{dead: map[string]int{}}
	r.committed = scalar(t, pool, q("SELECT count(*) FROM {p}.orders"))
	r.outboxRows = scalar(t, pool, q("SELECT count(*) FROM {p}.outbox"))
	r.outboxPublished = scalar(t, pool, q("SELECT count(*) FROM {p}.outbox WHERE status = 'published'"))
	r.brokerCopies = scalar(t, pool, q(`SELECT count(*) FROM {p}."watermill_orders"`))
	r.accepted = scalar(t, pool, q("SELECT count(*) FROM {p}.outbox AS o JOIN {c}.inbox AS i ON i.consumer = $1 AND i.message_id = o.id::text"), consumerName)
	r.lost = scalar(t, pool, q("SELECT count(*) FROM {p}.outbox AS o WHERE NOT EXISTS (SELECT 1 FROM {c}.inbox AS i WHERE i.consumer = $1 AND i.message_id = o.id::text)"), consumerName)
	r.poison = scalar(t, pool, q(`SELECT count(*) FROM {p}.outbox WHERE event_type LIKE 'Poison%' OR (event_type = 'OrderPlaced' AND ordering_key IS NULL)`))

	effects := q(`SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n IS NULL), count(*) FILTER (WHERE n > 1)
		FROM {p}.orders AS o LEFT JOIN (SELECT order_id, count(*) AS n FROM {c}.effects GROUP BY 1) AS e ON e.order_id = o.id`)
	require.NoError(t, pool.QueryRow(context.Background(), effects).Scan(&r.appliedOnce, &r.unapplied, &r.duplicated))
	if r.unapplied > 0 || r.duplicated > 0 {
		// Say which, with their inbox rows, so a failure can be traced.
		rows, err := pool.Query(context.Background(), q(`
			SELECT o.id, coalesce(e.n, 0), i.message_id, i.status, i.attempts, i.errors::text, i.processed_at::text
			FROM {p}.orders AS o
			LEFT JOIN (SELECT order_id, count(*) AS n FROM {c}.effects GROUP BY 1) AS e ON e.order_id = o.id
			LEFT JOIN {p}.outbox AS x ON x.event_type = 'OrderPlaced' AND x.ordering_key IS NOT NULL
			                           AND convert_from(x.payload, 'UTF8')::jsonb ->> 'order' = o.id::text
			LEFT JOIN {c}.inbox AS i ON i.consumer = $1 AND i.message_id = x.id::text
			WHERE coalesce(e.n, 0) <> 1`), consumerName)
		require.NoError(t, err)
		for rows.Next() {
			vals, err := rows.Values()
			require.NoError(t, err)
			t.Logf("order applied other than once (order, effects, message, status, attempts, errors, processed_at): %v", vals)
		}
		require.NoError(t, rows.Err())
	}
	calls := q(`SELECT count(*) FILTER (WHERE n >= 1), count(*) FILTER (WHERE n IS NULL), count(*) FILTER (WHERE n > 1), count(*) FILTER (WHERE keys > 1)
		FROM {p}.orders AS o LEFT JOIN (SELECT order_id, count(*) AS n, count(DISTINCT idempotency_key) AS keys FROM {c}.emails GROUP BY 1) AS e ON e.order_id = o.id`)
	require.NoError(t, pool.QueryRow(context.Background(), calls).Scan(&r.called, &r.uncalled, &r.recalled, &r.keysVaried))

	// Good messages: keyed OrderPlaced and EmailRequested; they must be done.
	r.goodNotDone = scalar(t, pool, q(`SELECT count(*) FROM {c}.inbox
		WHERE consumer = $1 AND status <> 'done'
		  AND (event_type = 'EmailRequested' OR (event_type = 'OrderPlaced' AND ordering_key IS NOT NULL))`), consumerName)
	r.badHistory = scalar(t, pool, q(`SELECT count(*) FROM {c}.inbox
		WHERE consumer = $1 AND status = 'dead' AND jsonb_array_length(errors) <> attempts`), consumerName)
	r.timeouts = scalar(t, pool, q(`SELECT count(*) FROM {c}.inbox AS i, jsonb_array_elements(i.errors) AS e
		WHERE e->>'error' LIKE '%statement timeout%' OR e->>'error' LIKE '%lock timeout%'`))

	rows, err := pool.Query(context.Background(), q(`
		SELECT event_type || ': ' || left(regexp_replace(last_error, '[0-9]+', 'N', 'g'), 70), count(*)
		FROM {c}.inbox WHERE consumer = $1 AND status = 'dead' GROUP BY 1 ORDER BY 1`), consumerName)
	require.NoError(t, err)
	var reason string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&reason, &n}, func() error { r.dead[reason] = n; return nil })
	require.NoError(t, err)
	return r
}

func (r *result) totalDead() int {
	total := 0
	for _, n := range r.dead {
		total += n
	}
	return total
}

// markdown renders the figures as a table for docs/reliability.md.
func (r *result) markdown(orders int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Chaos run: %d orders\n\n", orders)
	fmt.Fprintf(&b, "Faults: %s. Duration: %s.\n\n", r.faults, r.duration)
	fmt.Fprintln(&b, "| checked from the database | count |")
	fmt.Fprintln(&b, "|---|---:|")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("orders committed by the producers (ground truth)", r.committed)
	row("messages they wrote to the outbox (2 per order + poison)", r.outboxRows)
	row("published by the relays (none dead: a broker outage costs no attempt)", r.outboxPublished)
	if r.outages > 0 {
		row(fmt.Sprintf("relays that paused for the broker outage (attempt budget %d): must be all", relayMaxAttempts),
			fmt.Sprintf("%d of %d", r.relaysSawOutage, r.outageRelays))
		row("attempts charged during the broker outage (publish failures recorded from the kill to a lease after the restart): must be 0",
			fmt.Sprintf("%d (of %d in the whole run)", r.outageCharged, r.charged))
	}
	if r.brokerCopies > 0 { // watermill-sql's table; NATS keeps its own count
		row("copies the broker holds (a row published again after a relay was killed counts twice)", r.brokerCopies)
	}
	row("**accepted** into the consumer's inbox (distinct)", r.accepted)
	row("**lost** (written, never accepted): must be 0", r.lost)
	row("**applied exactly once** (in-transaction handler)", r.appliedOnce)
	row("not applied: must be 0", r.unapplied)
	row("**duplicated effects**: must be 0", r.duplicated)
	row("outside calls made at least once (leased handler)", r.called)
	row("outside calls never made: must be 0", r.uncalled)
	row("outside calls made again after a crash (allowed: at least once)", r.recalled)
	row("… with differing idempotency keys: must be 0", r.keysVaried)
	row("good messages not done: must be 0", r.goodNotDone)
	row("attempts ended by a statement or lock timeout, then retried", r.timeouts)
	row("poison messages written", r.poison)
	row("**dead**", r.totalDead())
	row("dead whose history lacks an entry per attempt: must be 0", r.badHistory)
	fmt.Fprintln(&b, "\nDead, by reason:")
	fmt.Fprintln(&b)
	for reason, n := range r.dead {
		fmt.Fprintf(&b, "- %d × `%s`\n", n, reason)
	}
	return b.String()
}

// assert fails the test unless every invariant holds.
func (r *result) assert(t *testing.T) {
	require.Positive(t, r.committed)
	require.Equal(t, r.outboxRows, r.outboxPublished, "every committed outbox message is published")
	require.Empty(t, r.silentRelays, "every relay running through a broker outage must pause for it, or report that it makes no progress "+
		"(an error log %q): these did neither within the outage:\n%s", outageReports, r.silentLogs)
	require.Zero(t, r.lost, "lost messages")
	require.Equal(t, r.outboxRows, r.accepted)
	require.Equal(t, r.committed, r.appliedOnce, "every order's in-transaction effect exactly once")
	require.Zero(t, r.unapplied)
	require.Zero(t, r.duplicated, "duplicated effects")
	require.Equal(t, r.committed, r.called)
	require.Zero(t, r.keysVaried)
	require.Zero(t, r.goodNotDone, "poison must block nothing but itself")
	require.Equal(t, r.poison, r.totalDead(), "every poison message, and only those, ends dead")
	require.Zero(t, r.badHistory)
	require.Positive(t, r.timeouts, "handlers must have hit statement and lock timeouts")
	// Last, so that a failure here leaves every other invariant checked.
	require.Zero(t, r.outageCharged, "a broker outage must charge no row an attempt; the first charged (at, row, attempt, error):\n%s", r.chargedList)
}
