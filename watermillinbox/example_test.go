package watermillinbox_test

import (
	"context"
	"fmt"
	"os"

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
