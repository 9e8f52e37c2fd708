package watermillsql_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/pgboxtest"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillsql"
)

// A relay publishes outbox rows to watermill-sql's table in the
// transaction that records them published, and watermill-sql's own
// subscriber reads them from the same database.
func Example() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_watermillsql")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	// The subscribers' table layout: watermill-sql's, its tables in the
	// example's schema, payloads as bytes.
	tables := wmsql.DefaultPostgreSQLSchema{
		GenerateMessagesTableName: func(topic string) string { return `"` + db.Schema + `"."watermill_` + topic + `"` },
		GeneratePayloadType:       func(string) string { return "BYTEA" },
	}
	pub, err := watermillsql.NewPublisher(db.Pool, watermillsql.Config{Schema: tables, InitializeSchema: true})
	if err != nil {
		panic(err)
	}
	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	defer sqlDB.Close()
	sub, err := wmsql.NewSubscriber(sqlDB, wmsql.SubscriberConfig{
		ConsumerGroup: "billing",
		SchemaAdapter: tables,
		OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: func(topic string) string {
			return `"` + db.Schema + `"."watermill_offsets_` + topic + `"`
		}},
		InitializeSchema: true,
		PollInterval:     10 * time.Millisecond,
	}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Subscribe creates the topic's tables (InitializeSchema) before the
	// relay's first publish, which would otherwise create it at the same
	// time: two creators of a table at once collide in PostgreSQL's
	// catalog, and watermill-sql's Subscribe fails.
	received, err := sub.Subscribe(subCtx, "orders")
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
	ids, err := box.Write(ctx, tx, outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: []byte(`{"order":17}`)})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	msg := <-received
	msg.Ack()
	fmt.Println(msg.UUID == ids[0].String(), msg.Metadata.Get(pgbox.MetadataEventType), string(msg.Payload))
	// Output:
	// true OrderPlaced {"order":17}
}
