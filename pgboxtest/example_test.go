package pgboxtest_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/pgboxtest"
)

// A payments consumer stores each delivery in its inbox, and a dispatcher
// records the payment in the transaction that marks the message done. The
// check delivers each order 8 times, one after another and all at once,
// crashing the dispatcher in between, and finds each order paid exactly
// once. The same check catches a consumer that pays on every delivery.
//
// In a test, pgboxtest.Schema(t, pool) gives the throwaway schema, and
// pgboxtest.RequireIdempotent(t, check) fails the test; an Example has no
// testing.T, so it calls Run.
func ExampleIdempotencyCheck() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_pgboxtest")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE "+db.Table("payments")+" (order_id text)"); err != nil {
		panic(err)
	}
	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}

	var d *dispatcher.Dispatcher
	start := func(ctx context.Context) error {
		next, err := dispatcher.New(db.Pool, dispatcher.Config{
			Inbox: payments,
			Handlers: map[string]dispatcher.Handler{
				"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
					_, err := tx.Exec(ctx, "INSERT INTO "+db.Table("payments")+" VALUES ($1)", m.ID)
					return err
				}),
			},
			Logger:       slog.New(slog.DiscardHandler),
			PollInterval: 10 * time.Millisecond,
		})
		if err != nil {
			return err
		}
		d = next
		return d.Start(ctx)
	}
	if err := start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = d.Stop(ctx) }()

	order := func(round int) string { return fmt.Sprint("order-", round) }
	check := pgboxtest.IdempotencyCheck{
		Deliver: func(ctx context.Context, del pgboxtest.Delivery) error {
			_, err := payments.Receive(ctx, inbox.Message{ID: order(del.Round), EventType: "OrderPlaced"})
			return err
		},
		// A crash: stop at once, cutting off whatever is in flight.
		Crash: func(context.Context) error {
			now, cancel := context.WithCancel(ctx)
			cancel()
			return d.Stop(now)
		},
		Restart: start,
		Settle:  func(ctx context.Context) error { return pgboxtest.WaitDrained(ctx, db.Pool, db.Schema) },
		Effect: func(ctx context.Context, round int) (n int, err error) {
			err = db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("payments")+" WHERE order_id = $1", order(round)).Scan(&n)
			return n, err
		},
	}
	fmt.Println("inbox and dispatcher:", check.Run(ctx))

	// A consumer without an inbox pays on every delivery.
	check.Deliver = func(ctx context.Context, del pgboxtest.Delivery) error {
		_, err := db.Pool.Exec(ctx, "INSERT INTO "+db.Table("payments")+" VALUES ($1)", "naive-"+order(del.Round))
		return err
	}
	check.Effect = func(ctx context.Context, round int) (n int, err error) {
		err = db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("payments")+" WHERE order_id = $1", "naive-"+order(round)).Scan(&n)
		return n, err
	}
	fmt.Println("naive:", check.Run(ctx))
	// Output:
	// inbox and dispatcher: <nil>
	// naive: pgboxtest: not idempotent: round 1 (8 sequential deliveries, with crashes) had its effect 8 times, want exactly 1
}
