package inbox

import (
	"errors"
	"fmt"
)

// ErrInvalidMessage is wrapped by every error about a message the inbox
// refuses to store: an empty or over-long id, a missing event type, a
// payload over the limit, metadata PostgreSQL cannot hold. Nothing is
// written for such a message.
var ErrInvalidMessage = errors.New("invalid message")

// ErrPayloadConflict is matched (errors.Is) by a *ConflictError.
var ErrPayloadConflict = errors.New("message id reused with a different payload")

// ConflictError reports a delivery whose id the consumer already holds with
// a different payload. The stored message is left as it was (never
// overwritten, never applied twice) and the delivery, with its payload, is
// recorded in the inbox_conflicts table for operators: at once by Receive
// and ReceiveBatch, before returning by Process, and by ReceiveTx and
// ReceiveBatchTx when the caller's transaction commits. A conflict means a
// producer reuses ids for distinct messages or changed a message between
// retries: the producer needs fixing.
type ConflictError struct {
	// Consumer is the consumer that holds the message.
	Consumer string
	// MessageID is the reused id.
	MessageID string
}

// Error describes the conflict and what it means.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("inbox: consumer %q already holds message %q with a different payload: the redelivery was not stored; the producer is reusing ids or changing messages between retries", e.Consumer, e.MessageID)
}

// Is lets errors.Is(err, ErrPayloadConflict) match.
func (e *ConflictError) Is(target error) bool { return target == ErrPayloadConflict }

// ErrNeedsReadCommitted is matched (errors.Is) by the error of ReceiveTx,
// ReceiveBatchTx or Process run in a REPEATABLE READ or SERIALIZABLE
// transaction on a message whose id is not a UUIDv7. Such ids are kept in
// generations, and a redelivery is looked up in the earlier ones with the
// statement's own snapshot: a snapshot taken when the transaction began
// could miss a delivery that a concurrent receive stored meanwhile. Nothing
// was stored, and the transaction is aborted: roll it back. UUIDv7 ids (as
// pgbox's outbox makes them) may be received at any isolation level.
var ErrNeedsReadCommitted = errors.New("undated message id received outside READ COMMITTED")
