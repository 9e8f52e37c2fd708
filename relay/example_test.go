package relay_test

import (
	"context"
	"fmt"
	"os"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/pgboxtest"
	"github.com/pgbox/pgbox/relay"
)

// The relay publishes committed outbox rows through any Watermill
// publisher, here Watermill's in-process GoChannel; in production it is
// watermill-sql, NATS JetStream or Kafka. The message's UUID is the outbox
// id on every attempt, so consumers can dedupe redeliveries.
func Example() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_relay")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	broker := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer broker.Close()
	received, err := broker.Subscribe(ctx, "orders")
	if err != nil {
		panic(err)
	}

	r, err := relay.New(db.Pool, relay.Config{Publisher: broker, Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = r.Stop(ctx) }()

	box, err := outbox.New(db.Pool, outbox.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	ids, err := box.Write(ctx, tx, outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: []byte(`{"order":17}`)})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	msg := <-received // the commit's notification wakes the relay
	msg.Ack()
	fmt.Println(msg.UUID == ids[0].String(), msg.Metadata.Get(pgbox.MetadataEventType), string(msg.Payload))
	// Output:
	// true OrderPlaced {"order":17}
}
