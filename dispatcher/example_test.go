package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/pgboxtest"
)

// An in-transaction handler records a payment in the transaction that
// marks its message done: the payment exists exactly once per message,
// whatever crashes or redeliveries happen.
func Example() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_dispatcher")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE "+db.Table("payments")+" (order_id text PRIMARY KEY)"); err != nil {
		panic(err)
	}

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"order-1", "order-2", "order-1"} { // order-1 is delivered twice
		if _, err := payments.Receive(ctx, inbox.Message{ID: id, EventType: "OrderPlaced"}); err != nil {
			panic(err)
		}
	}

	handled := make(chan string)
	d, err := dispatcher.New(db.Pool, dispatcher.Config{
		Inbox: payments,
		Handlers: map[string]dispatcher.Handler{
			"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
				if _, err := tx.Exec(ctx, "INSERT INTO "+db.Table("payments")+" VALUES ($1)", m.ID); err != nil {
					return err
				}
				handled <- m.ID
				return nil
			}),
		},
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	fmt.Println(<-handled)
	fmt.Println(<-handled)
	if err := d.Stop(ctx); err != nil {
		panic(err)
	}
	// Two workers may handle the two messages in either order; order-1
	// runs once although it was delivered twice.

	// Unordered output:
	// order-1
	// order-2
}

// A leased handler calls a payment gateway outside any transaction. The
// gateway's first answer is a 503, so the message is retried, with the same
// idempotency key, which lets the gateway recognise the repeat.
func ExampleLeased() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_dispatcher_leased")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	var (
		mu   sync.Mutex
		keys []string
	)
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		if len(keys) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "charged")
	}))
	defer gateway.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	if _, err := payments.Receive(ctx, inbox.Message{ID: "order-17", EventType: "ChargeCard", Payload: []byte(`{"cents":4200}`)}); err != nil {
		panic(err)
	}

	charged := make(chan int)
	d, err := dispatcher.New(db.Pool, dispatcher.Config{
		Inbox:            payments,
		RetryBackoffFunc: func(int) time.Duration { return 10 * time.Millisecond },
		Handlers: map[string]dispatcher.Handler{
			"ChargeCard": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, gateway.URL, strings.NewReader(string(m.Payload)))
				if err != nil {
					return dispatcher.Permanent(err)
				}
				req.Header.Set("Idempotency-Key", m.IdempotencyKey())
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode >= 500 {
					return fmt.Errorf("gateway: %s", resp.Status)
				}
				charged <- m.Attempt
				return nil
			}),
		},
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	fmt.Println("charged on attempt", <-charged)
	if err := d.Stop(ctx); err != nil {
		panic(err)
	}
	mu.Lock()
	fmt.Println("calls:", len(keys), "same key:", keys[0] == keys[1])
	mu.Unlock()
	// Output:
	// charged on attempt 2
	// calls: 2 same key: true
}

// A handler that can never succeed returns Permanent: the message is dead
// at once, with its error recorded, and stays until an operator replays or
// discards it. Errors without Permanent are retried until MaxAttempts.
func ExamplePermanent() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_dispatcher_permanent")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	if _, err := payments.Receive(ctx, inbox.Message{ID: "order-99", EventType: "OrderPlaced", Payload: []byte("not json")}); err != nil {
		panic(err)
	}

	tried := make(chan struct{})
	d, err := dispatcher.New(db.Pool, dispatcher.Config{
		Inbox: payments,
		Handlers: map[string]dispatcher.Handler{
			"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
				defer close(tried)
				return dispatcher.Permanent(errors.New("payload is not JSON"))
			}),
		},
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	<-tried
	if err := d.Stop(ctx); err != nil { // returns once the outcome is recorded
		panic(err)
	}

	var (
		status, lastError string
		attempts          int
	)
	err = db.Pool.QueryRow(ctx, "SELECT status, attempts, last_error FROM "+db.Table("inbox")+" WHERE message_id = 'order-99'").
		Scan(&status, &attempts, &lastError)
	if err != nil {
		panic(err)
	}
	fmt.Println(status, attempts, lastError)
	// Output:
	// dead 1 permanent: payload is not JSON
}

// Snooze puts a message back without spending an attempt, here until the
// order it pays for has arrived.
func ExampleSnooze() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_dispatcher_snooze")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	if _, err := payments.Receive(ctx, inbox.Message{ID: "payment-5", EventType: "PaymentCaptured"}); err != nil {
		panic(err)
	}

	var calls atomic.Int32 // attempts may run on different workers
	done := make(chan int)
	d, err := dispatcher.New(db.Pool, dispatcher.Config{
		Inbox: payments,
		Handlers: map[string]dispatcher.Handler{
			"PaymentCaptured": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
				if calls.Add(1) < 3 { // the order is not there yet
					return dispatcher.Snooze(10 * time.Millisecond)
				}
				done <- m.Attempt
				return nil
			}),
		},
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	fmt.Println("handled on call", 3, "as attempt", <-done)
	if err := d.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// handled on call 3 as attempt 1
}

// Unavailable says the payment gateway is down, not the message bad: the
// attempt is not counted, so the message, allowed a single attempt here,
// does not die. The dispatcher stops claiming ChargeCard messages, probes
// with one after a backoff, and once the gateway answers, claims them at
// full speed again.
func ExampleUnavailable() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_dispatcher_unavailable")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", MaxAttempts: 1, Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	if _, err := payments.Receive(ctx, inbox.Message{ID: "order-8", EventType: "ChargeCard"}); err != nil {
		panic(err)
	}

	var calls atomic.Int32 // calls may run on different workers
	done := make(chan int)
	d, err := dispatcher.New(db.Pool, dispatcher.Config{
		Inbox: payments,
		Handlers: map[string]dispatcher.Handler{
			"ChargeCard": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
				if calls.Add(1) < 3 { // the gateway is down for the first two calls
					return dispatcher.Unavailable(errors.New("gateway: connection refused"))
				}
				done <- m.Attempt
				return nil
			}),
		},
		UnavailableBackoffFunc: func(probe int) time.Duration { return 10 * time.Millisecond },
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	fmt.Println("charged on call", 3, "as attempt", <-done)
	if err := d.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// charged on call 3 as attempt 1
}

// Stop drains the handlers in flight. When its deadline passes it cancels
// them, and the messages they held go back to pending, to be handled by the
// next dispatcher: nothing is lost.
func ExampleDispatcher_Stop() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_dispatcher_stop")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	if _, err := payments.Receive(ctx, inbox.Message{ID: "slow", EventType: "Report"}); err != nil {
		panic(err)
	}

	started := make(chan struct{})
	d, err := dispatcher.New(db.Pool, dispatcher.Config{
		Inbox: payments,
		Handlers: map[string]dispatcher.Handler{
			"Report": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
				close(started)
				<-ctx.Done() // a long job that honours cancellation
				return ctx.Err()
			}),
		},
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	<-started

	shutdown, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := d.Stop(shutdown); err != nil {
		panic(err)
	}

	var (
		status   string
		attempts int
	)
	err = db.Pool.QueryRow(ctx, "SELECT status, attempts FROM "+db.Table("inbox")+" WHERE message_id = 'slow'").Scan(&status, &attempts)
	if err != nil {
		panic(err)
	}
	fmt.Println(status, attempts)
	// Output:
	// pending 0
}
