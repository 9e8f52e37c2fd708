package outbox_test

import (
	"context"
	"fmt"
	"os"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/pgboxtest"
)

// The order and its OrderPlaced message commit together: if the
// transaction rolls back, no message is ever published.
func ExampleOutbox_Write() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_outbox_write")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE "+db.Table("orders")+" (id int PRIMARY KEY)"); err != nil {
		panic(err)
	}

	box, err := outbox.New(db.Pool, outbox.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "INSERT INTO "+db.Table("orders")+" VALUES (17)"); err != nil {
		panic(err)
	}
	ids, err := box.Write(ctx, tx, outbox.Message{
		Topic:       "orders",
		EventType:   "OrderPlaced",
		OrderingKey: "order-17",
		Payload:     []byte(`{"order":17,"cents":4200}`),
	})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	fmt.Println("message id is a UUIDv7:", ids[0].Version() == 7)
	// Output:
	// message id is a UUIDv7: true
}

// Existing Watermill producer code publishes transactionally through a
// publisher bound to the business transaction.
func ExampleOutbox_Publisher() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_outbox_publisher")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	box, err := outbox.New(db.Pool, outbox.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":17}`))
	msg.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
	if err := box.Publisher(ctx, tx).Publish("orders", msg); err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	var eventType string
	if err := db.Pool.QueryRow(ctx, "SELECT event_type FROM "+db.Table("outbox")+" WHERE id = $1", msg.UUID).Scan(&eventType); err != nil {
		panic(err)
	}
	fmt.Println(eventType)
	// Output:
	// OrderPlaced
}
