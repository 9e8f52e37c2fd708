// Package inbox makes a message consumer idempotent: it stores each
// delivered message once per consumer, however many times the broker or
// client delivers it.
//
// The inbox is a PostgreSQL table keyed by (consumer, message id). Storing
// a message is an INSERT … ON CONFLICT DO NOTHING, so a redelivery, even one
// racing the first delivery on another connection, finds the message
// already there and is reported as a Duplicate rather than stored twice.
// The inbox also keeps a SHA-256 hash of each payload: a redelivery of the
// same id with different bytes is a Conflict, reported with a
// *ConflictError and counted on the stored row, never applied.
//
// # Two ways to consume
//
// Asynchronously: Receive (or ReceiveBatch) stores the message as pending,
// the caller acknowledges the broker, and a dispatcher (package dispatcher)
// runs the handler later, with retries, backoff and dead messages.
//
//	in, err := inbox.New(pool, inbox.Config{Consumer: "payments"})
//	outcome, err := in.Receive(ctx, inbox.Message{ID: id, EventType: "OrderPlaced", Payload: body})
//	// Accepted or Duplicate: ack the broker. An error: nack, it will come again.
//
// Synchronously: Process records the message as done and runs the
// caller's function in the same transaction, so the function's writes
// happen exactly once:
//
//	outcome, err := in.Process(ctx, msg, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "INSERT INTO payments (order_id, amount) VALUES ($1, $2)", orderID, amount)
//		return err
//	})
//
// # Inside the caller's transaction
//
// ReceiveTx and ReceiveBatchTx store messages in a transaction the caller
// owns, together with the caller's own writes; the message exists, and idle
// dispatchers are woken, only if that transaction commits.
//
// # Ordering keys
//
// Messages that share Message.OrderingKey are handled by the dispatcher
// one at a time, in the order they were received. Receivers of one key take
// turns (a transaction-scoped advisory lock), so that order is their commit
// order, even when a receiving transaction that started first commits last.
//
// # What an id costs to keep
//
// The inbox keeps each consumer's messages for the retention window, so
// that late redeliveries are still found. A UUIDv7 id, as pgbox's outbox
// makes them, is dated by its own time and kept in its day's partition,
// where a week of messages costs the hot paths nothing. An id that is no
// UUIDv7 (a broker's message id, a business key) is dated likewise by
// Message.IDTime, a time that every delivery of the id carries (an SQS
// SentTimestamp, a Kafka record's timestamp); without one it is kept in
// the inbox's generations, at the cost of an index of random ids.
// docs/design.md, "Dated foreign ids", says how far dedupe reaches when
// that time differs between deliveries.
//
// # Bad input
//
// A message with an empty or over-long id, no event type, a payload over
// Config.MaxPayloadBytes, or metadata PostgreSQL cannot store is rejected
// with an error wrapping ErrInvalidMessage that names the field, and nothing
// is written. In a batch it is rejected alone; its neighbours are stored.
package inbox
