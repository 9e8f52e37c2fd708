package inbox

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
)

// Process is the synchronous idempotent consumer: in one transaction it
// records msg as done and runs fn, so fn's writes and the record commit
// together or not at all. A message the consumer already holds is not run
// again: Process returns Duplicate (or Conflict with a *ConflictError, after
// recording the conflict) without calling fn. A redelivery of an id this
// Inbox remembers (Config.RecentIDs) is answered without a transaction.
//
// When fn returns an error (or panics) the transaction rolls back and
// nothing is recorded, so a redelivery of the message runs fn again. fn's
// error is returned as is. Process does not retry; use the dispatcher for
// retries with backoff and dead messages.
func (in *Inbox) Process(ctx context.Context, msg Message, fn func(ctx context.Context, tx pgx.Tx) error) (Outcome, error) {
	if err := in.validate(&msg); err != nil {
		return 0, err
	}
	sum := sha256.Sum256(msg.Payload)
	if in.remembers(msg.ID, sum) {
		// A redelivery of a message known to be committed: a duplicate,
		// without a transaction.
		in.tel.Count(ctx, 0, 1, 0)
		return Duplicate, nil
	}
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("inbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	res, err := in.receive(ctx, tx, []Message{msg}, pgbox.InboxDone, false)
	if err != nil {
		return 0, err
	}
	switch res[0].Outcome {
	case Duplicate:
		// Nothing was written: the deferred rollback ends it. The stored
		// row was committed by another transaction (this one wrote
		// nothing before), so it can be remembered, while there is room.
		in.recent.Fill(msg.ID, sum)
		in.tel.Count(ctx, 0, 1, 0)
		return Duplicate, nil
	case Conflict:
		// The transaction holds only the conflict's record: keep it.
		if err := tx.Commit(ctx); err != nil {
			return Conflict, fmt.Errorf("inbox: record conflict of message %q: %w", msg.ID, err)
		}
		in.tel.Count(ctx, 0, 0, 1)
		return Conflict, res[0].Err
	}
	if err := fn(ctx, tx); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("inbox: commit message %q: %w", msg.ID, err)
	}
	in.recent.Add(msg.ID, sum)
	in.tel.Count(ctx, 1, 0, 0)
	return Accepted, nil
}
