package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Message is a stored message handed to a handler.
type Message struct {
	// Attempt is this attempt's number: 1 the first time.
	Attempt int
	// Consumer is the consumer the message was received for.
	Consumer string
	// EventType is the type the message was routed by.
	EventType string
	// ID is the message id the inbox deduped on.
	ID string
	// MaxAttempts is how many attempts the message gets before it is dead.
	MaxAttempts int
	// Metadata is the metadata it was received with.
	Metadata map[string]string
	// OrderingKey is its ordering key, or "" for none.
	OrderingKey string
	// Payload is its body, byte for byte as received.
	Payload []byte
	// ReceivedAt is when the inbox stored it (database time).
	ReceivedAt time.Time
}

// idempotencyNamespace scopes IdempotencyKey's name-based UUIDs to pgbox.
var idempotencyNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/pgbox/pgbox#idempotency-key"))

// IdempotencyKey returns a key that is the same on every attempt, in every
// process, for this consumer and message, and different for any other.
// Pass it to the outside system a leased handler calls (an Idempotency-Key
// header, a payment provider's idempotency_key) so that a repeated call
// after a crash is recognised there. It is a UUID (version 5, derived from
// the consumer and message id), accepted wherever such keys are.
func (m *Message) IdempotencyKey() string {
	return uuid.NewSHA1(idempotencyNamespace, []byte(m.Consumer+"\x00"+m.ID)).String()
}

// TxFunc handles a message inside the transaction that marks it done.
type TxFunc func(ctx context.Context, tx pgx.Tx, msg *Message) error

// LeasedFunc handles a message outside any transaction, under a lease.
type LeasedFunc func(ctx context.Context, msg *Message) error

// Handler handles the messages of one event type. Build one with InTx or
// Leased.
type Handler struct {
	inTx   TxFunc
	leased LeasedFunc
}

// InTx returns a handler that runs fn in the transaction that also marks
// the message done. fn's writes (business rows, outbox messages) and the
// done mark commit together or not at all, so their effect happens exactly
// once. The transaction is shared with the other messages of the worker's
// batch, each inside its own savepoint: when fn fails, its writes are rolled
// back and its neighbours' are kept.
//
// fn must not commit or roll back tx (those calls return an error); it
// returns nil for success or an error to retry. It must not keep tx, or rows
// read from it, after returning.
func InTx(fn TxFunc) Handler { return Handler{inTx: fn} }

// Leased returns a handler for side effects outside the database (an email,
// an HTTP call to a payment gateway). The message is claimed with a lease
// and the claim committed; fn runs with no transaction open; then the
// message is marked done. If the process dies while fn runs, the lease
// expires and another worker runs fn again: delivery to the outside world is
// at least once. Pass msg.IdempotencyKey() to the system fn calls so it can
// recognise the repeat.
//
// fn's context ends after Config.HandlerTimeout, which is shorter than the
// lease, so a handler that honours it never overlaps another worker's
// attempt.
func Leased(fn LeasedFunc) Handler { return Handler{leased: fn} }

func (h Handler) valid() bool { return (h.inTx == nil) != (h.leased == nil) }

// PermanentError marks a handler error as not worth retrying: the message
// is dead at once. Create one with Permanent.
type PermanentError struct {
	// Err is the handler's error.
	Err error
}

// Permanent wraps err so that the dispatcher marks the message dead now
// instead of retrying it: for a payload that can never be handled, say.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &PermanentError{Err: err}
}

// Error returns the wrapped error's text.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// SnoozeError asks for the message to be tried again later without
// counting the attempt. Create one with Snooze.
type SnoozeError struct {
	// After is how long to wait before the next attempt.
	After time.Duration
}

// Snooze returns an error that puts the message back to wait for d (judged
// by the database clock) without spending an attempt: for a dependency that
// is not ready yet. An in-transaction handler's writes are rolled back.
func Snooze(d time.Duration) error { return &SnoozeError{After: max(d, 0)} }

// Error says how long the message is snoozed.
func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.After) }

// UnavailableError marks a handler error as a downstream outage rather
// than a failure of the message: the dependency the handler calls (a
// payment gateway, a mail server) cannot be reached. Create one with
// Unavailable.
type UnavailableError struct {
	// Err is the handler's error: what it found unavailable.
	Err error
}

// Unavailable wraps err to say that the handler's dependency is down, not
// that the message is bad: the opposite of Permanent. The attempt is not
// counted (attempts and last error stay as they were) and the message goes
// back to pending; an in-transaction handler's writes are rolled back, and
// its neighbours' are kept. The dispatcher then stops claiming messages of
// the message's event type, in this process, for
// Config.UnavailableBackoffFunc's wait, lets one message through as a
// probe, and resumes at full speed as soon as a probe's handler returns
// anything but Unavailable. So an outage of any length leaves no message
// dead. See Dispatcher.UnavailableErr.
func Unavailable(err error) error {
	if err == nil {
		err = errors.New("dependency unavailable")
	}
	return &UnavailableError{Err: err}
}

// Error returns the wrapped error's text.
func (e *UnavailableError) Error() string { return "unavailable: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *UnavailableError) Unwrap() error { return e.Err }
