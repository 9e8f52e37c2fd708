package natsjs_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	wmjetstream "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/natsjs"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/pgboxtest"
	"github.com/pgbox/pgbox/relay"
)

// A relay publishes through the Publisher to NATS JetStream, a batch of
// rows per call, and watermill-nats's subscriber reads the messages.
func Example() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_natsjs")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	// A stream named after the topic and bound to it, as watermill-nats's
	// subscriber expects by default; a name of its own, for a server that
	// other runs share.
	topic := "example_natsjs_orders_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: topic, Subjects: []string{topic}}); err != nil {
		panic(err)
	}
	defer func() { _ = js.DeleteStream(ctx, topic) }()

	pub, err := natsjs.NewPublisher(nc, natsjs.Config{})
	if err != nil {
		panic(err)
	}
	r, err := relay.New(db.Pool, relay.Config{Publisher: pub, Schema: db.Schema})
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
	ids, err := box.Write(ctx, tx, outbox.Message{Topic: topic, EventType: "OrderPlaced", Payload: []byte(`{"order":17}`)})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	// Ended by closing nc, not by its Close, which drains nc on a
	// goroutine of its own.
	sub, err := wmjetstream.NewSubscriber(wmjetstream.SubscriberConfig{Conn: nc, Logger: watermill.NopLogger{}})
	if err != nil {
		panic(err)
	}
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	received, err := sub.Subscribe(subCtx, topic)
	if err != nil {
		panic(err)
	}
	msg := <-received
	msg.Ack()
	fmt.Println(msg.UUID == ids[0].String(), msg.Metadata.Get(pgbox.MetadataEventType), string(msg.Payload))
	// Output:
	// true OrderPlaced {"order":17}
}
