package redisstream_test

import (
	"context"
	"fmt"
	"os"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/pgboxtest"
	"github.com/pgbox/pgbox/redisstream"
	"github.com/pgbox/pgbox/relay"
)

// A relay publishes through the Publisher to Redis Streams, a batch of
// rows per pipeline, and watermill-redisstream's Subscriber reads the
// messages.
func Example() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_redisstream")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(opts)

	// A stream of its own, for a server that other runs share.
	topic := "example_redisstream_orders_" + uuid.NewString()

	// OwnsClient: the publisher's Close closes rdb, as
	// watermill-redisstream's publisher's would.
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, OwnsClient: true})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	defer func() { _ = rdb.Del(ctx, topic).Err() }() // before pub.Close closes rdb
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

	// The subscriber closes its own client when it is closed.
	sub, err := wmredis.NewSubscriber(wmredis.SubscriberConfig{
		Client: redis.NewClient(opts), ConsumerGroup: "payments", DisableIndefiniteInitialBlock: true,
	}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
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
