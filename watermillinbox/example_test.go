package watermillinbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/pgboxtest"
	"github.com/pgbox/pgbox/watermillinbox"
)

// A Watermill router stores every delivery in the consumer's inbox; the
// same message delivered three times is stored once (a dispatcher then
// handles it once).
func ExampleHandler() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_watermillinbox")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	broker := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	defer broker.Close()

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	store := watermillinbox.Handler(watermillinbox.Config{Inbox: payments})
	acked := make(chan struct{}, 3)
	router.AddConsumerHandler("payments-inbox", "orders", broker, func(m *message.Message) error {
		if err := store(m); err != nil {
			return err // nack: the broker delivers it again
		}
		acked <- struct{}{}
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- router.Run(runCtx) }()
	<-router.Running()

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":17}`))
	msg.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
	for range 3 { // the broker redelivers it
		if err := broker.Publish("orders", msg.Copy()); err != nil {
			panic(err)
		}
	}
	for range 3 {
		<-acked
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}

	var stored int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("inbox")).Scan(&stored); err != nil {
		panic(err)
	}
	fmt.Println("acknowledged: 3, stored:", stored)
	// Output:
	// acknowledged: 3, stored: 1
}

// A foreign producer's messages carry a broker message id (random, no
// UUIDv7) and the time the broker stamped them with, the same on every
// delivery: IDTimeFunc dates the id by that time, so the message is kept
// in that day's partition, as cheap to keep as a UUIDv7, and its
// redelivery is found there. Here the time travels in a header; on Amazon
// SQS pass the SentTimestamp function of package sqs, on Kafka the record
// time of package kafka.
func ExampleHandler_datedIDs() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_watermillinbox_dated")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	payments, err := inbox.New(db.Pool, inbox.Config{Consumer: "payments", Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	store := watermillinbox.Handler(watermillinbox.Config{
		Inbox:  payments,
		IDFunc: watermillinbox.MetadataID("message_id"),
		IDTimeFunc: func(m *message.Message) time.Time {
			t, _ := time.Parse(time.RFC3339Nano, m.Metadata.Get("sent_at")) // zero (undated) if absent
			return t
		},
	})

	msg := message.NewMessage("", []byte(`{"order":17}`))
	msg.Metadata.Set("message_id", "5fb1c3a4-0d3e-4c8e-9a55-4f3c2b1d0e9f") // a broker's random id
	msg.Metadata.Set("sent_at", time.Now().UTC().Format(time.RFC3339Nano))
	msg.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
	for range 2 { // the broker redelivers it
		if err := store(msg.Copy()); err != nil {
			panic(err)
		}
	}

	var stored int
	var partition string
	if err := db.Pool.QueryRow(ctx, "SELECT count(*), min(tableoid::regclass::text) FROM "+db.Table("inbox")).Scan(&stored, &partition); err != nil {
		panic(err)
	}
	fmt.Println("stored:", stored, "in a day's partition:", strings.Contains(partition, "inbox_d"))
	// Output:
	// stored: 1 in a day's partition: true
}
