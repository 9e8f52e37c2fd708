// Package outbox makes a producer reliable: the messages a service means
// to publish are written in the same transaction as the business change
// that causes them, so they exist if and only if the change committed.
// The relay (package relay) then publishes them to a broker, at least once.
//
//	box, _ := outbox.New(pool, outbox.Config{})
//	tx, _ := pool.Begin(ctx)
//	_, _ = tx.Exec(ctx, "INSERT INTO orders (id, cents) VALUES ($1, $2)", id, cents)
//	_, err := box.Write(ctx, tx, outbox.Message{
//		Topic:     "orders",
//		EventType: "OrderPlaced",
//		Payload:   body,
//	})
//	err = tx.Commit(ctx) // the order and its message, or neither
//
// Each message gets a UUIDv7 id, which is published as its Watermill UUID:
// the key the consumer's inbox dedupes on, the same on every publish. The
// trace context of the writing context travels in the metadata.
//
// Messages that share an OrderingKey are published in the order their
// transactions committed: writers of one key take turns until commit
// (a transaction-scoped advisory lock), so keep such transactions short.
//
// Producer code written against Watermill can stay as it is:
// Publisher(ctx, tx) returns a message.Publisher that writes into the
// outbox inside tx.
package outbox
