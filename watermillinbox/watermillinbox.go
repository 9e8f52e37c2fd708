// Package watermillinbox stores the messages of a Watermill subscription
// in a pgbox inbox: the broker-facing half of an idempotent consumer.
//
// Handler returns a Watermill handler that receives each message into the
// inbox and returns nil (so the router acknowledges it) only once the insert
// has committed. A redelivery, from the broker or from a relay that
// published twice, is found in the inbox and acknowledged without being
// stored again; the dispatcher then runs the consumer's handler once.
//
//	in, _ := inbox.New(pool, inbox.Config{Consumer: "payments"})
//	router.AddNoPublisherHandler("payments-inbox", "orders", subscriber,
//		watermillinbox.Handler(watermillinbox.Config{Inbox: in}))
//
// The dedupe key is the message's Watermill UUID, which pgbox's relay sets
// to the outbox row's id, so it is the same on every delivery end to end. A
// different key can be taken from a header (MetadataID) or built from the
// payload (Config.IDFunc).
package watermillinbox

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/inbox"
)

// Config configures Handler.
type Config struct {
	// EventTypeFunc returns the event type a message is stored under, which
	// routes it to a dispatcher handler. Defaults to the
	// pgbox.MetadataEventType metadata (set by pgbox's relay), or, when that
	// is absent, the topic the router received the message from.
	EventTypeFunc func(*message.Message) string

	// IDFunc returns a message's dedupe key. Defaults to its Watermill UUID.
	// Use MetadataID for a header, or build a business key from the payload.
	IDFunc func(*message.Message) (string, error)

	// Inbox is the consumer's inbox. Required.
	Inbox *inbox.Inbox

	// Logger receives conflicting redeliveries (acknowledged, and recorded
	// in the inbox) at error level. Defaults to slog.Default().
	Logger *slog.Logger

	// OrderingKeyFunc returns a message's ordering key, or "" for none.
	// Defaults to the pgbox.MetadataOrderingKey metadata.
	OrderingKeyFunc func(*message.Message) string
}

// MetadataID returns an IDFunc that takes the dedupe key from the metadata
// (header) key, such as "x-event-id". A message without it is refused.
func MetadataID(key string) func(*message.Message) (string, error) {
	return func(m *message.Message) (string, error) {
		if id := m.Metadata.Get(key); id != "" {
			return id, nil
		}
		return "", fmt.Errorf("metadata %q is missing or empty: it is this consumer's dedupe key", key)
	}
}

// Handler returns a Watermill handler that stores each message in
// cfg.Inbox. It returns:
//
//   - nil (ack) when the message was stored, or was already held: a
//     duplicate;
//   - nil (ack) for a conflicting redelivery (the same id with another
//     payload), which the inbox records in inbox_conflicts and never
//     applies: redelivering it could never succeed;
//   - an error (nack, so the broker delivers it again) when the database
//     could not be reached;
//   - an error wrapping inbox.ErrInvalidMessage for a message that can never
//     be stored (no id, no event type, a payload over the limit). Route it
//     to a poison queue, for instance with Watermill's
//     middleware.PoisonQueueWithFilter; otherwise it is redelivered for
//     ever, never silently dropped.
//
// Handler panics if cfg.Inbox is nil: that is a programming error.
func Handler(cfg Config) message.NoPublishHandlerFunc {
	if cfg.Inbox == nil {
		panic("watermillinbox: Config.Inbox is nil")
	}
	if cfg.EventTypeFunc == nil {
		cfg.EventTypeFunc = defaultEventType
	}
	if cfg.IDFunc == nil {
		cfg.IDFunc = func(m *message.Message) (string, error) { return m.UUID, nil }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OrderingKeyFunc == nil {
		cfg.OrderingKeyFunc = func(m *message.Message) string { return m.Metadata.Get(pgbox.MetadataOrderingKey) }
	}
	return func(m *message.Message) error {
		id, err := cfg.IDFunc(m)
		if err != nil {
			return fmt.Errorf("watermillinbox: %w: %v", inbox.ErrInvalidMessage, err)
		}
		_, err = cfg.Inbox.Receive(m.Context(), inbox.Message{
			EventType:   cfg.EventTypeFunc(m),
			ID:          id,
			Metadata:    m.Metadata,
			OrderingKey: cfg.OrderingKeyFunc(m),
			Payload:     m.Payload,
		})
		if errors.Is(err, inbox.ErrPayloadConflict) {
			cfg.Logger.ErrorContext(m.Context(), "watermillinbox: conflicting redelivery acknowledged and recorded, not applied",
				slog.String("consumer", cfg.Inbox.Consumer()), slog.String("message_id", id), slog.String("error", err.Error()))
			return nil
		}
		if err != nil {
			return fmt.Errorf("watermillinbox: %w", err)
		}
		return nil
	}
}

func defaultEventType(m *message.Message) string {
	if t := m.Metadata.Get(pgbox.MetadataEventType); t != "" {
		return t
	}
	return message.SubscribeTopicFromCtx(m.Context())
}
