package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a run did and what the database says came of it. Every
// count below except Client comes from a table, read after every process
// has exited.
type Report struct {
	// Client is what the HTTP clients sent and were told.
	Client ClientStats
	// Elapsed is the whole run's duration.
	Elapsed time.Duration
	// Kill describes the SIGKILL of payments-1.
	Kill KillStats
	// Orders is how many orders the clients wanted placed (carts).
	Orders int
	// Republished is how many OrderPlaced events were re-published by hand
	// under new message ids.
	Republished int
	// Unsettled, when not empty, says what was still in flight when the
	// run's time ran out.
	Unsettled string

	// OrdersAccepted counts rows in the orders table.
	OrdersAccepted int
	// OrdersPerCart classifies carts by how many orders they have.
	OrdersPerCart Once
	// OrdersNotFromCarts counts orders of no cart the clients sent.
	OrdersNotFromCarts int
	// AnswersNotStored counts carts whose 201 named an order that is not
	// in the table.
	AnswersNotStored int

	// PaymentsHop is the broker hop from orders to payments.
	PaymentsHop Hop
	// Payments classifies orders by their payment rows.
	Payments Once
	// PaymentsCaptured counts payments marked captured.
	PaymentsCaptured int
	// IgnoredByNaturalKey counts OrderPlaced messages the payments table's
	// primary key absorbed (the same order under another message id).
	IgnoredByNaturalKey int
	// Rescued counts payments messages whose claim was lost with the
	// killed process and which another worker took over after the lease.
	Rescued int

	// Gateway is what the payment gateway received.
	Gateway ProviderStats
	// Charges classifies orders by the charges the gateway made for them.
	Charges Once

	// NotificationsHop is the broker hop from payments to notifications.
	NotificationsHop Hop
	// MailSink is what the mail service received.
	MailSink ProviderStats
	// Emails classifies orders by the emails the mail service sent about
	// them.
	Emails Once

	// Dead counts dead rows in every inbox and outbox.
	Dead int
	// Conflicts counts redeliveries that reused a message id with other
	// bytes, in every inbox.
	Conflicts int
}

// KillStats describes the SIGKILL of a payments process.
type KillStats struct {
	// ChargesInFlight is how many gateway calls it had under way.
	ChargesInFlight int64
	// Done reports whether it was killed.
	Done bool
	// OrdersPlaced is how many orders were placed when it was killed.
	OrdersPlaced int64
	// PID was its process id.
	PID int
}

// Once classifies the expected items (orders, or carts) by how many times
// something happened to each.
type Once struct {
	// Exactly counts items it happened to exactly once.
	Exactly int
	// More counts items it happened to more than once.
	More int
	// Never counts items it never happened to.
	Never int
	// Strays counts times it happened to something that is no expected
	// item (a charge for an unknown order).
	Strays int
	// Wrong counts items it happened to with the wrong amount.
	Wrong int
}

func (o Once) ok(want int) bool {
	return o.Exactly == want && o.More == 0 && o.Never == 0 && o.Strays == 0 && o.Wrong == 0
}

// Hop is one broker hop: deliveries into a consumer's inbox.
type Hop struct {
	// Deliveries counts deliveries the consumer acknowledged.
	Deliveries int
	// Injected counts those the demo's subscriber duplicated on purpose.
	Injected int
	// Published counts the distinct messages the producer's outbox holds
	// for the hop.
	Published int
	// Stored counts the distinct messages the consumer's inbox stored.
	Stored int
}

// ProviderStats is what a stand-in provider received.
type ProviderStats struct {
	// Applied counts requests applied: a charge made, an email sent.
	Applied int
	// Lost counts requests applied whose answer was dropped on purpose.
	Lost int
	// Rejected counts requests refused as malformed or reusing a key with
	// other parameters: each is a violation.
	Rejected int
	// Replayed counts requests with a key seen before: answered with the
	// first result, nothing applied.
	Replayed int
	// Requests counts every request received.
	Requests int
	// Unavailable counts requests answered 503 on purpose.
	Unavailable int
}

// Violations lists every invariant that does not hold; none means the run
// proved what it set out to.
func (r *Report) Violations() []string {
	var v []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			v = append(v, fmt.Sprintf(format, args...))
		}
	}
	check(r.Unsettled == "", "%s", r.Unsettled)
	check(r.Client.Failed == 0, "%d carts never got an order placed", r.Client.Failed)
	check(r.Client.Mismatched == 0, "%d retries were answered with a different order", r.Client.Mismatched)
	check(r.OrdersPerCart.ok(r.Orders) && r.OrdersNotFromCarts == 0 && r.AnswersNotStored == 0,
		"orders per cart: %+v, %d orders of no cart, %d answers naming no stored order", r.OrdersPerCart, r.OrdersNotFromCarts, r.AnswersNotStored)
	check(r.Payments.ok(r.OrdersAccepted) && r.PaymentsCaptured == r.OrdersAccepted,
		"payments per order: %+v, %d captured of %d", r.Payments, r.PaymentsCaptured, r.OrdersAccepted)
	check(r.Charges.ok(r.OrdersAccepted), "gateway charges per order: %+v", r.Charges)
	check(r.Emails.ok(r.OrdersAccepted), "emails per order: %+v", r.Emails)
	check(r.Gateway.Rejected == 0, "the gateway rejected %d requests", r.Gateway.Rejected)
	check(r.MailSink.Rejected == 0, "the mail service rejected %d requests", r.MailSink.Rejected)
	check(r.Dead == 0, "%d dead messages", r.Dead)
	check(r.Conflicts == 0, "%d conflicting redeliveries", r.Conflicts)
	return v
}

// verify counts, from the database, what became of the run.
func (r *run) verify(ctx context.Context, all []cart, load *loader, republished int, kill killResult) (*Report, error) {
	rep := &Report{
		Client:      load.stats(),
		Kill:        KillStats{ChargesInFlight: kill.inFlight, Done: kill.pid != 0, OrdersPlaced: kill.placed, PID: kill.pid},
		Orders:      len(all),
		Republished: republished,
	}
	cartIDs := make([]string, len(all))
	var answeredCarts, answeredOrders []string
	load.mu.Lock()
	for i, c := range all {
		cartIDs[i] = c.id
		if id, ok := load.orderIDs[c.id]; ok {
			answeredCarts, answeredOrders = append(answeredCarts, c.id), append(answeredOrders, id)
		}
	}
	load.mu.Unlock()

	queries := []query{
		// Orders: one per cart, and each the one the client was told about.
		{`WITH carts AS (SELECT unnest($1::text[]) AS cart),
		       n AS (SELECT cart, count(*) AS n FROM {orders}.orders GROUP BY cart)
		  SELECT count(*) FILTER (WHERE n.n = 1), count(*) FILTER (WHERE n.n > 1), count(*) FILTER (WHERE n.n IS NULL),
		         (SELECT count(*) FROM {orders}.orders),
		         (SELECT count(*) FROM {orders}.orders WHERE cart <> ALL ($1))
		  FROM carts LEFT JOIN n USING (cart)`,
			[]any{cartIDs},
			[]any{&rep.OrdersPerCart.Exactly, &rep.OrdersPerCart.More, &rep.OrdersPerCart.Never, &rep.OrdersAccepted, &rep.OrdersNotFromCarts}},
		{`SELECT count(*) FROM unnest($1::text[], $2::text[]) AS a(cart, order_id)
		  WHERE NOT EXISTS (SELECT 1 FROM {orders}.orders AS o WHERE o.cart = a.cart AND o.id::text = a.order_id)`,
			[]any{answeredCarts, answeredOrders},
			[]any{&rep.AnswersNotStored}},

		// Orders → payments, through the broker.
		{`SELECT (SELECT count(*) FROM {orders}.outbox),
		         (SELECT count(*) FROM {payments}.deliveries),
		         (SELECT count(*) FROM {payments}.deliveries WHERE injected),
		         (SELECT count(*) FROM {payments}.inbox WHERE event_type = 'OrderPlaced'),
		         (SELECT count(*) FROM {payments}.ignored_events)`,
			nil,
			[]any{&rep.PaymentsHop.Published, &rep.PaymentsHop.Deliveries, &rep.PaymentsHop.Injected, &rep.PaymentsHop.Stored, &rep.IgnoredByNaturalKey}},
		{`SELECT count(*) FILTER (WHERE p.order_id IS NOT NULL AND p.cents = o.cents),
		         0,
		         count(*) FILTER (WHERE p.order_id IS NULL),
		         (SELECT count(*) FROM {payments}.payments AS p WHERE NOT EXISTS (SELECT 1 FROM {orders}.orders AS o WHERE o.id::text = p.order_id)),
		         count(*) FILTER (WHERE p.cents <> o.cents),
		         count(*) FILTER (WHERE p.status = 'captured')
		  FROM {orders}.orders AS o LEFT JOIN {payments}.payments AS p ON p.order_id = o.id::text`,
			nil,
			[]any{&rep.Payments.Exactly, &rep.Payments.More, &rep.Payments.Never, &rep.Payments.Strays, &rep.Payments.Wrong, &rep.PaymentsCaptured}},
		// A message whose claim died with the killed process carries a
		// "lease expired" entry in its history (written by the dispatcher
		// that took it over).
		{`SELECT count(*) FROM {payments}.inbox
		  WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(errors) AS e WHERE e->>'error' LIKE 'lease expired%')`,
			nil,
			[]any{&rep.Rescued}},

		// Payments → gateway: charges per order, from the gateway's own
		// tables.
		providerQuery(`{gateway}`, &rep.Gateway),
		perOrderQuery(`SELECT order_id, cents FROM {gateway}.charges`, &rep.Charges),

		// Payments → notifications, through the broker.
		{`SELECT (SELECT count(*) FROM {payments}.outbox),
		         (SELECT count(*) FROM {notifications}.deliveries),
		         (SELECT count(*) FROM {notifications}.deliveries WHERE injected),
		         (SELECT count(*) FROM {notifications}.inbox)`,
			nil,
			[]any{&rep.NotificationsHop.Published, &rep.NotificationsHop.Deliveries, &rep.NotificationsHop.Injected, &rep.NotificationsHop.Stored}},

		// Notifications → mail service: emails per order, from the mail
		// service's own tables.
		providerQuery(`{mailsink}`, &rep.MailSink),
		perOrderQuery(`SELECT order_id, NULL::bigint AS cents FROM {mailsink}.messages`, &rep.Emails),

		// What nobody could handle.
		{`SELECT (SELECT count(*) FROM {orders}.outbox WHERE status = 'dead')
		       + (SELECT count(*) FROM {payments}.inbox WHERE status = 'dead')
		       + (SELECT count(*) FROM {payments}.outbox WHERE status = 'dead')
		       + (SELECT count(*) FROM {notifications}.inbox WHERE status = 'dead'),
		         (SELECT count(*) FROM {payments}.inbox_conflicts) + (SELECT count(*) FROM {notifications}.inbox_conflicts)`,
			nil,
			[]any{&rep.Dead, &rep.Conflicts}},
	}
	for _, q := range queries {
		if err := r.pool.QueryRow(ctx, r.sql(q.sql), q.args...).Scan(q.dest...); err != nil {
			return nil, fmt.Errorf("verify: %w\n%s", err, r.sql(q.sql))
		}
	}
	return rep, nil
}

// query is a statement that returns one row, and where to scan it.
type query struct {
	sql  string
	args []any
	dest []any
}

// providerQuery counts a provider's requests by outcome.
func providerQuery(schema string, s *ProviderStats) query {
	return query{
		`SELECT count(*), count(*) FILTER (WHERE outcome = 'applied'), count(*) FILTER (WHERE outcome = 'replayed'),
		        count(*) FILTER (WHERE outcome = 'unavailable'), count(*) FILTER (WHERE outcome = 'rejected'),
		        count(*) FILTER (WHERE response_lost)
		 FROM ` + schema + `.requests`,
		nil,
		[]any{&s.Requests, &s.Applied, &s.Replayed, &s.Unavailable, &s.Rejected, &s.Lost},
	}
}

// perOrderQuery classifies accepted orders by how many rows of effects
// (order_id, cents) they have; cents may be NULL when there is no amount
// to check.
func perOrderQuery(effects string, o *Once) query {
	return query{
		`WITH e AS (` + effects + `),
		      n AS (SELECT o.id, count(e.order_id) AS n, count(*) FILTER (WHERE e.cents <> o.cents) AS wrong
		            FROM {orders}.orders AS o LEFT JOIN e ON e.order_id = o.id::text GROUP BY o.id)
		 SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n > 1), count(*) FILTER (WHERE n = 0),
		        (SELECT count(*) FROM e WHERE NOT EXISTS (SELECT 1 FROM {orders}.orders AS o WHERE o.id::text = e.order_id)),
		        count(*) FILTER (WHERE wrong > 0)
		 FROM n`,
		nil,
		[]any{&o.Exactly, &o.More, &o.Never, &o.Strays, &o.Wrong},
	}
}

// print writes the report: the hops, then the verdict.
func (r *Report) print(out io.Writer) {
	fmt.Fprintln(out)
	row := func(hop string, received, applied, absorbed any, how string) {
		fmt.Fprintf(out, "  %-26s %9v %8v %9v  %s\n", hop, received, applied, absorbed, how)
	}
	c := r.Client
	row("hop", "received", "applied", "absorbed", "by")
	row("client → orders API", c.Requests, r.OrdersAccepted, c.Requests-int64(r.OrdersAccepted),
		fmt.Sprintf("Idempotency-Key: %d replayed, %d answered 409 while the first ran, %d cut off by the client, %d 5xx retried", c.Replayed, c.InProgress, c.Cancelled, c.ServerErrors))
	h := r.PaymentsHop
	row("orders → payments", h.Deliveries, h.Stored, h.Deliveries-h.Stored,
		fmt.Sprintf("inbox, same message id (%d duplicated by the subscriber, the rest by relays and the broker)", h.Injected))
	row("  OrderPlaced, new id", r.Republished, 0, r.IgnoredByNaturalKey, "payments' primary key, order_id (re-published by hand)")
	g := r.Gateway
	row("payments → gateway", g.Requests, g.Applied, g.Replayed,
		fmt.Sprintf("gateway Idempotency-Key: first charge replayed (%d 503s and %d lost answers injected)", g.Unavailable, g.Lost))
	h = r.NotificationsHop
	row("payments → notifications", h.Deliveries, h.Stored, h.Deliveries-h.Stored,
		fmt.Sprintf("inbox, same message id (%d duplicated by the subscriber, the rest by relays and the broker)", h.Injected))
	m := r.MailSink
	row("notifications → mail", m.Requests, m.Applied, m.Replayed,
		fmt.Sprintf("mail Idempotency-Key: first send replayed (%d 503s and %d lost answers injected)", m.Unavailable, m.Lost))

	fmt.Fprintln(out)
	if r.Kill.Done {
		fmt.Fprintf(out, "SIGKILL: payments-1 (pid %d) was killed with %d gateway calls in flight; %d of its messages were taken over after their lease.\n\n",
			r.Kill.PID, r.Kill.ChargesInFlight, r.Rescued)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	verdict := func(label string, got, want int, detail string) {
		fmt.Fprintf(w, "  %s\t%d/%d\t%s\n", label, got, want, detail)
	}
	verdict("orders accepted", r.OrdersPerCart.Exactly, r.Orders,
		fmt.Sprintf("carts with two orders: %d, with none: %d; answers naming another order: %d", r.OrdersPerCart.More, r.OrdersPerCart.Never, c.Mismatched))
	verdict("payments recorded", r.Payments.Exactly, r.OrdersAccepted,
		fmt.Sprintf("captured: %d, missing: %d, wrong amount: %d", r.PaymentsCaptured, r.Payments.Never, r.Payments.Wrong))
	verdict("charged exactly once", r.Charges.Exactly, r.OrdersAccepted,
		fmt.Sprintf("twice or more: %d, never: %d, wrong amount: %d, unknown order: %d", r.Charges.More, r.Charges.Never, r.Charges.Wrong, r.Charges.Strays))
	verdict("mailed exactly once", r.Emails.Exactly, r.OrdersAccepted,
		fmt.Sprintf("twice or more: %d, never: %d, unknown order: %d", r.Emails.More, r.Emails.Never, r.Emails.Strays))
	fmt.Fprintf(w, "  dead messages\t%d\tin every inbox and outbox; conflicting redeliveries: %d\n", r.Dead, r.Conflicts)
	_ = w.Flush()
	fmt.Fprintln(out)
	if v := r.Violations(); len(v) > 0 {
		fmt.Fprintf(out, "FAILED after %s:\n  %s\n", r.Elapsed.Round(100*time.Millisecond), strings.Join(v, "\n  "))
		return
	}
	fmt.Fprintf(out, "PASSED in %s: every order was placed once, charged once and mailed once.\n", r.Elapsed.Round(100*time.Millisecond))
}
