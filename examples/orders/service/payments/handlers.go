package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/examples/orders/events"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/outbox"
)

// handleOrderPlaced records the payment for an order and enqueues the
// request to charge it, in tx: the transaction that also marks the
// OrderPlaced message done. Both happen exactly once, or (if anything
// fails) not at all and the message is retried.
func (s *Service) handleOrderPlaced(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
	o, err := events.Decode[events.OrderPlaced](m.Payload)
	if err != nil {
		return dispatcher.Permanent(err) // retrying cannot fix a bad payload: dead, for an operator
	}
	tag, err := tx.Exec(ctx, s.sql(insertPaymentSQL), o.OrderID, o.Cents, o.Email, m.ID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		// The inbox stores each message id once, so this is the same order
		// under another message id: re-emitted by its producer. The natural
		// key absorbs it. (Should the amount differ, it is not the same
		// order at all: fail loudly, never charge.)
		var cents int64
		if err := tx.QueryRow(ctx, s.sql(paymentCentsSQL), o.OrderID).Scan(&cents); err != nil {
			return err
		}
		if cents != o.Cents {
			return dispatcher.Permanent(fmt.Errorf("order %s arrived again with %d cents, but its payment is for %d", o.OrderID, o.Cents, cents))
		}
		_, err := tx.Exec(ctx, s.sql(insertIgnoredSQL), m.ID, o.OrderID, "payment for this order already recorded from message "+m.ID)
		return err
	}

	// Enqueue the charge into this consumer's own inbox, in this
	// transaction. Its id is derived from the order, so it is also a natural
	// key; its idempotency key (derived from the consumer and that id) is
	// what the gateway will see on every attempt.
	metadata := map[string]string{}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(metadata)) // the charge continues the order's trace
	_, err = s.inbox.ReceiveTx(ctx, tx, inbox.Message{
		EventType: events.TypeChargeRequested,
		ID:        "charge/" + o.OrderID,
		Metadata:  metadata,
		Payload:   events.Encode(events.ChargeRequested{Cents: o.Cents, OrderID: o.OrderID}),
	})
	return err
}

// handleChargeRequested charges an order through the gateway. It runs under
// a lease with no transaction open: if this process dies during the call,
// the message is claimed again when the lease expires, and the gateway sees
// the same idempotency key again, so it replays the first charge rather
// than making a second.
func (s *Service) handleChargeRequested(ctx context.Context, m *dispatcher.Message) error {
	c, err := events.Decode[events.ChargeRequested](m.Payload)
	if err != nil {
		return dispatcher.Permanent(err)
	}

	s.stats.chargesInFlight.Add(1)
	charge, err := s.gateway.charge(ctx, m.IdempotencyKey(), c)
	s.stats.chargesInFlight.Add(-1)
	if err != nil {
		return err // a 5xx or a lost answer: retried, with the same key
	}
	s.stats.charged.Add(1)

	// Record the capture and announce it in one transaction. The status
	// guard makes it happen once: if an earlier attempt recorded it and
	// died before the dispatcher marked the message done, this attempt
	// finds the payment captured and writes nothing.
	return pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		var email string
		err := tx.QueryRow(ctx, s.sql(capturePaymentSQL), c.OrderID, charge.ID).Scan(&email)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // captured already
		}
		if err != nil {
			return err
		}
		_, err = s.outbox.Write(ctx, tx, outbox.Message{
			EventType: events.TypePaymentCaptured,
			Payload: events.Encode(events.PaymentCaptured{
				Cents:    charge.Cents,
				ChargeID: charge.ID,
				Email:    email,
				OrderID:  c.OrderID,
			}),
			Topic: events.TopicPayments,
		})
		return err
	})
}
