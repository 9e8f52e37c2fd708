package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/pgboxtest"
)

// A broker delivers the same message twice: the inbox stores it once and
// reports the second delivery as a duplicate, which the consumer simply
// acknowledges.
func ExampleInbox_Receive() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_inbox_receive")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	msg := inbox.Message{ID: "order-17/placed", EventType: "OrderPlaced", Payload: []byte(`{"order":17,"cents":4200}`)}
	for range 2 {
		outcome, err := payments.Receive(ctx, msg)
		if err != nil {
			panic(err) // nack: the broker will deliver it again
		}
		fmt.Println(outcome) // either way, ack
	}

	// The same id with other bytes is a conflict, never applied.
	msg.Payload = []byte(`{"order":17,"cents":9999}`)
	outcome, err := payments.Receive(ctx, msg)
	fmt.Println(outcome, errors.Is(err, inbox.ErrPayloadConflict))
	// Output:
	// accepted
	// duplicate
	// conflict true
}

// ReceiveBatch stores many messages in one round trip; each gets its own
// result, so one bad message does not sink its neighbours.
func ExampleInbox_ReceiveBatch() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_inbox_receive_batch")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	results, err := payments.ReceiveBatch(ctx, []inbox.Message{
		{ID: "m-1", EventType: "OrderPlaced"},
		{ID: "m-2", EventType: ""}, // invalid: no event type
		{ID: "m-1", EventType: "OrderPlaced"},
	})
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		if errors.Is(r.Err, inbox.ErrInvalidMessage) {
			fmt.Println("rejected:", r.Err)
			continue
		}
		fmt.Println(r.Outcome)
	}
	// Output:
	// accepted
	// rejected: invalid message "m-2": EventType is empty: set it so the dispatcher can route the message
	// duplicate
}

// Process is the synchronous idempotent consumer: the handler's writes and
// the record of the message commit together, so a redelivery does not
// charge the customer twice.
func ExampleInbox_Process() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_inbox_process")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE "+db.Table("charges")+" (order_id int, cents int)"); err != nil {
		panic(err)
	}

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+db.Table("charges")+" VALUES (17, 4200)")
		return err
	}
	msg := inbox.Message{ID: "order-17/placed", EventType: "OrderPlaced"}
	for range 3 { // the broker delivers it three times
		outcome, err := payments.Process(ctx, msg, charge)
		if err != nil {
			panic(err)
		}
		fmt.Println(outcome)
	}

	var charges int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("charges")).Scan(&charges); err != nil {
		panic(err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// accepted
	// duplicate
	// duplicate
	// charges: 1
}

// An SQS message's MessageId is random, but its SentTimestamp is the same
// on every receive: given as IDTime, it dates the id, which is then kept
// in that day's partition, as cheaply as a UUIDv7. A redelivery, even one
// re-stamped an hour later by a retrying producer, is a duplicate.
func ExampleMessage_iDTime() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_inbox_idtime")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	sent := time.Now() // the broker's SentTimestamp
	msg := inbox.Message{ID: "c9a5e2b0-3f1d-4e8a-b6c4-1d2e3f4a5b6c", IDTime: sent, EventType: "OrderPlaced", Payload: []byte(`{"order":17}`)}
	for _, at := range []time.Time{sent, sent, sent.Add(time.Hour)} {
		msg.IDTime = at
		outcome, err := payments.Receive(ctx, msg)
		if err != nil {
			panic(err)
		}
		fmt.Println(outcome)
	}
	// Output:
	// accepted
	// duplicate
	// duplicate
}
