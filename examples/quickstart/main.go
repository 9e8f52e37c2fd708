// Command quickstart runs pgbox's inbox and dispatcher end to end on a real
// PostgreSQL and checks the result: `make demo-quickstart` runs it.
//
// It plays a broker that delivers 400 orders at least once (about half of
// them two or three times, from eight goroutines at once), a payments
// consumer that stores each delivery in its inbox and acknowledges it, and a
// dispatcher whose in-transaction handler records one payment per order.
// A few poison messages fail every attempt and end dead; one order is
// redelivered with a changed payload and rejected as a conflict. At the end
// it counts, from the database itself, what happened, and exits non-zero if
// any order was paid other than exactly once.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/examples/internal/inspect"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/migrations"
)

func main() {
	var (
		orders  = flag.Int("orders", 400, "orders to deliver")
		poison  = flag.Int("poison", 5, "poison messages that can never be handled")
		schema  = flag.String("schema", "pgbox_quickstart", "schema to (re)create for the run")
		timeout = flag.Duration("timeout", time.Minute, "give up if the run has not settled by then")
	)
	flag.Parse()
	if err := run(*orders, *poison, *schema, *timeout, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

type order struct {
	Cents int    `json:"cents"`
	ID    string `json:"order"`
}

// tally counts what the deliverers were told by the inbox.
type tally struct {
	deliveries, accepted, duplicates, conflicts atomic.Int64
}

func run(orders, poison int, schema string, timeout time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is not set: run `make demo-quickstart`, which starts a local PostgreSQL")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Queries name their tables as "schema".table; the schema is quoted
	// as an identifier, never spliced raw.
	quoted := pgx.Identifier{schema}.Sanitize()
	sql := func(q string) string { return strings.ReplaceAll(q, "/* schema */", quoted+".") }

	// A fresh schema per run, with the business table the handler writes.
	// It has no unique key on purpose: a second payment would show.
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE"); err != nil {
		return fmt.Errorf("reset schema: %w", err)
	}
	if err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, sql("CREATE TABLE /* schema */payments (order_id text NOT NULL, cents int NOT NULL, paid_at timestamptz DEFAULT now())")); err != nil {
		return err
	}

	payments, err := inbox.New(pool, inbox.Config{Consumer: "payments", MaxAttempts: 3, Schema: schema})
	if err != nil {
		return err
	}
	d, err := dispatcher.New(pool, dispatcher.Config{
		Inbox:  payments,
		Logger: slog.New(slog.DiscardHandler), // the table below tells the story
		RetryBackoffFunc: func(attempt int) time.Duration {
			return time.Duration(attempt) * 20 * time.Millisecond
		},
		Handlers: map[string]dispatcher.Handler{
			"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
				var o order
				if err := json.Unmarshal(m.Payload, &o); err != nil {
					return fmt.Errorf("payload is not an order: %w", err)
				}
				_, err := tx.Exec(ctx, sql("INSERT INTO /* schema */payments (order_id, cents) VALUES ($1, $2)"), o.ID, o.Cents)
				return err
			}),
		},
	})
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	started := time.Now()

	// The broker: every order at least once, many twice or three times, in
	// random order from eight connections, while the dispatcher works.
	var deliveries []inbox.Message
	for i := range orders {
		body, _ := json.Marshal(order{Cents: 100 + i, ID: fmt.Sprintf("order-%04d", i)})
		m := inbox.Message{ID: fmt.Sprintf("order-%04d/placed", i), EventType: "OrderPlaced", Payload: body}
		for range 1 + rand.N(3) {
			deliveries = append(deliveries, m)
		}
	}
	for i := range poison {
		m := inbox.Message{ID: fmt.Sprintf("poison-%d", i), EventType: "OrderPlaced", Payload: []byte("<order>not json</order>")}
		deliveries = append(deliveries, m, m)
	}
	conflicting := deliveries[0]
	conflicting.Payload = []byte(`{"order":"order-0000","cents":999999}`)
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	deliveries = append(deliveries, conflicting) // after the original, whatever the shuffle did

	var (
		t    tally
		wg   sync.WaitGroup
		errs = make(chan error, 8)
		next atomic.Int64
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(deliveries)-1 { // the conflicting redelivery goes last, below
					return
				}
				if err := deliver(ctx, payments, deliveries[i], &t); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if err := deliver(ctx, payments, conflicting, &t); err != nil {
		return err
	}

	// Wait until nothing is pending or running, then stop.
	for {
		var busy bool
		if err := pool.QueryRow(ctx, sql("SELECT EXISTS (SELECT 1 FROM /* schema */inbox WHERE status IN ('pending', 'running'))")).Scan(&busy); err != nil {
			return fmt.Errorf("waiting for the dispatcher: %w", err)
		}
		if !busy {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(started)
	if err := d.Stop(ctx); err != nil {
		return err
	}
	err = report(ctx, pool, sql, quoted, orders, poison, &t, elapsed, out)
	leftBehind(out, url, schema, quoted)
	return err
}

// deliver is the consumer's broker handler: store, then ack. An error
// would be a nack; a duplicate or a conflict is acked.
func deliver(ctx context.Context, in *inbox.Inbox, m inbox.Message, t *tally) error {
	t.deliveries.Add(1)
	outcome, err := in.Receive(ctx, m)
	switch {
	case errors.Is(err, inbox.ErrPayloadConflict):
		t.conflicts.Add(1)
	case err != nil:
		return err
	case outcome == inbox.Accepted:
		t.accepted.Add(1)
	case outcome == inbox.Duplicate:
		t.duplicates.Add(1)
	}
	return nil
}

// report counts the outcome from the database, independently of the
// engine, prints it, and fails if any order was not paid exactly once.
func report(ctx context.Context, pool *pgxpool.Pool, sql func(string) string, quoted string, orders, poison int, t *tally, elapsed time.Duration, out io.Writer) error {
	var done, dead, conflicts, paidOnce, paidTwice, unpaid int
	err := pool.QueryRow(ctx, sql(`
		SELECT count(*) FILTER (WHERE status = 'done'),
		       count(*) FILTER (WHERE status = 'dead'),
		       (SELECT count(*) FROM /* schema */inbox_conflicts)
		FROM /* schema */inbox`)).Scan(&done, &dead, &conflicts)
	if err != nil {
		return err
	}
	err = pool.QueryRow(ctx, sql(`
		WITH expected AS (SELECT format('order-%s', lpad(i::text, 4, '0')) AS order_id FROM generate_series(0, $1 - 1) i),
		     paid AS (SELECT order_id, count(*) AS n FROM /* schema */payments GROUP BY order_id)
		SELECT count(*) FILTER (WHERE paid.n = 1),
		       count(*) FILTER (WHERE paid.n > 1),
		       count(*) FILTER (WHERE paid.n IS NULL)
		FROM expected LEFT JOIN paid USING (order_id)`), orders).Scan(&paidOnce, &paidTwice, &unpaid)
	if err != nil {
		return err
	}
	var deadReason string
	_ = pool.QueryRow(ctx, sql("SELECT coalesce(min(last_error), '') FROM /* schema */inbox WHERE status = 'dead'")).Scan(&deadReason)

	ok := paidOnce == orders && paidTwice == 0 && unpaid == 0 && done == orders && dead == poison &&
		int(t.accepted.Load()) == orders+poison && int(t.conflicts.Load()) == 1 && conflicts == 1

	fmt.Fprintf(out, "pgbox quickstart: %d orders and %d poison messages, delivered %d times by 8 concurrent deliverers\n\n",
		orders, poison, t.deliveries.Load())
	row := func(label string, n any, note string) { fmt.Fprintf(out, "  %-18s %8v   %s\n", label, n, note) }
	row("deliveries", t.deliveries.Load(), "what the broker sent")
	row("accepted", t.accepted.Load(), "stored once each in the inbox")
	row("duplicates", t.duplicates.Load(), "redeliveries absorbed by the inbox")
	row("conflicts", conflicts, "same id, different payload: rejected, kept in inbox_conflicts")
	row("processed", done, "handled and marked done")
	row("dead", dead, fmt.Sprintf("poison, after 3 attempts each: %q", deadReason))
	row("paid exactly once", fmt.Sprintf("%d/%d", paidOnce, orders), fmt.Sprintf("paid twice: %d, unpaid: %d", paidTwice, unpaid))
	fmt.Fprintf(out, "\nsettled in %s\n", elapsed.Round(time.Millisecond))
	if !ok {
		return errors.New("verification FAILED: some order was not paid exactly once, or a count is off")
	}
	fmt.Fprintln(out, "verification passed: every order paid exactly once")
	return nil
}

// leftBehind prints the commands that show what the run left in schema,
// pasteable as printed from the repository's root.
func leftBehind(out io.Writer, url, schema, quoted string) {
	fmt.Fprintln(out, "\nWhat it left behind, from the repository's root:")
	fmt.Fprintln(out, "  "+inspect.Inboxctl(url, "stats", "--schema", schema))
	fmt.Fprintln(out, "  "+inspect.Inboxctl(url, "failures", "--schema", schema))
	fmt.Fprintln(out, "  "+inspect.Psql(url, "SELECT status, count(*) FROM "+quoted+".inbox GROUP BY 1"))
	if note := inspect.PasswordNote(url); note != "" {
		fmt.Fprintln(out, "  "+note)
	}
	fmt.Fprintln(out, "  "+inspect.SetupNote(url))
}
