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
// message from a producer that is not Watermill has no UUID: take its key
// from a header (MetadataID, such as "x-event-id") or a payload field
// (PayloadID, such as a business key), or build it with Config.IDFunc.
// Such a key costs the inbox what a UUIDv7 costs to keep only if it is
// dated: give Config.IDTimeFunc the broker's fixed time of the message
// (its send, publish or record time).
//
// A message that can never be stored (no usable id, no event type, a
// payload over the limit) would be redelivered for ever and, on Kafka,
// stop its partition; Handler logs that once per cause, saying what to do.
// Give Config.PoisonPublisher and Config.PoisonTopic: Handler then
// publishes such a message there with the reason and acknowledges it.
package watermillinbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

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

	// IDFunc returns a message's dedupe key. Defaults to its Watermill UUID,
	// which a message from a producer that is not Watermill does not have:
	// such a message is refused. Use MetadataID for a header, PayloadID for
	// a payload field, or build a business key.
	IDFunc func(*message.Message) (string, error)

	// IDTimeFunc returns the time fixed with a message's dedupe key, which
	// every delivery of the message carries: its inbox.Message.IDTime. An
	// id that is no UUIDv7 (a broker's message id, a business key) is then
	// dated by it: kept in that day's partition, at the cost of a UUIDv7,
	// instead of in the generations' index of random ids. A UUIDv7 key,
	// such as a message from pgbox's relay, is dated by its own time and
	// the result is ignored. The zero Time leaves the message undated.
	//
	// Pass the broker's own time of the message, never a clock's reading
	// at delivery: Amazon SQS's SentTimestamp (see package sqs), a Kafka
	// record's timestamp (see package kafka), a Google Cloud Pub/Sub
	// publish time (see package googlepubsub), or an event's own time
	// from the payload when the key is a business key. (Redis Streams'
	// watermill-redisstream hands over neither an entry's id nor its
	// time: docs/operations.md, "Redis Streams".) docs/operations.md,
	// "Message ids", says which fits which IDFunc. Defaults to nil:
	// messages are undated unless their key is a UUIDv7.
	IDTimeFunc func(*message.Message) time.Time

	// Inbox is the consumer's inbox. Required.
	Inbox *inbox.Inbox

	// Logger receives, at error level: conflicting redeliveries
	// (acknowledged, and recorded in the inbox); messages moved to the
	// poison topic; and, without a PoisonPublisher, messages nacked because
	// they can never be stored, once per cause, with what to do, and again
	// each hour while that cause recurs, not once per redelivery.
	// Defaults to slog.Default().
	Logger *slog.Logger

	// OrderingKeyFunc returns a message's ordering key, or "" for none.
	// Defaults to the pgbox.MetadataOrderingKey metadata.
	OrderingKeyFunc func(*message.Message) string

	// PoisonPublisher, with PoisonTopic, is where a message that can never
	// be stored goes (the error wraps inbox.ErrInvalidMessage): Handler
	// publishes it to PoisonTopic, with the reason in the metadata key
	// middleware.ReasonForPoisonedKey ("reason_poisoned") and its topic in
	// middleware.PoisonedTopicKey, as Watermill's PoisonQueue middleware
	// does, logs it at error and acknowledges it, so that the messages
	// behind it flow on. If that publish fails the message is nacked. Unset
	// (the default), such a message is nacked, and redelivered for ever.
	PoisonPublisher message.Publisher

	// PoisonTopic is the topic PoisonPublisher publishes to. Required with
	// PoisonPublisher.
	PoisonTopic string
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

// PayloadID returns an IDFunc that takes the dedupe key from field of the
// JSON object in the payload: a top-level name ("event_id"), or a path
// through nested objects separated by dots ("order.id"). The field must be
// a non-empty string or a number. A message without it is refused.
func PayloadID(field string) func(*message.Message) (string, error) {
	path := strings.Split(field, ".")
	return func(m *message.Message) (string, error) {
		d := json.NewDecoder(bytes.NewReader(m.Payload))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return "", fmt.Errorf("payload is not JSON, so it has no field %q, this consumer's dedupe key: %v", field, err)
		}
		for _, name := range path {
			obj, ok := v.(map[string]any)
			if !ok {
				return "", fmt.Errorf("payload field %q is missing: it is this consumer's dedupe key", field)
			}
			v = obj[name]
		}
		switch id := v.(type) {
		case string:
			if id != "" {
				return id, nil
			}
		case json.Number:
			return id.String(), nil
		case nil:
			return "", fmt.Errorf("payload field %q is missing or null: it is this consumer's dedupe key", field)
		}
		return "", fmt.Errorf("payload field %q is not a non-empty string or a number: it is this consumer's dedupe key", field)
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
//   - for a message that can never be stored (no id, no event type, a
//     payload over the limit): nil (ack) once it is published to
//     Config.PoisonTopic, or, without a PoisonPublisher, an error wrapping
//     inbox.ErrInvalidMessage (nack; it is redelivered for ever, never
//     silently dropped), logged once per cause (see Config.Logger).
//
// Calls of the handler at once (several subscriptions, a subscriber that
// delivers many messages at a time) store their messages together: the
// messages that arrive while a store is in flight go in the next one, one
// statement and one commit for all (inbox.ReceiveBatch). Each call still
// returns its own message's outcome, once that is committed. A
// subscription that delivers one message at a time stores each alone.
//
// Handler panics if cfg.Inbox is nil, or if only one of PoisonPublisher
// and PoisonTopic is set: those are programming errors.
func Handler(cfg Config) message.NoPublishHandlerFunc {
	if cfg.Inbox == nil {
		panic("watermillinbox: Config.Inbox is nil")
	}
	if (cfg.PoisonPublisher == nil) != (cfg.PoisonTopic == "") {
		panic("watermillinbox: set both Config.PoisonPublisher and Config.PoisonTopic, or neither")
	}
	if cfg.EventTypeFunc == nil {
		cfg.EventTypeFunc = defaultEventType
	}
	if cfg.IDFunc == nil {
		cfg.IDFunc = watermillUUID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OrderingKeyFunc == nil {
		cfg.OrderingKeyFunc = func(m *message.Message) string { return m.Metadata.Get(pgbox.MetadataOrderingKey) }
	}
	stuck := &stuckCauses{last: map[string]time.Time{}}
	g := &group{in: cfg.Inbox}
	return func(m *message.Message) error {
		id, err := store(cfg, g, m)
		if err == nil || !errors.Is(err, inbox.ErrInvalidMessage) {
			return err
		}
		if cfg.PoisonPublisher != nil {
			return poison(cfg, m, err)
		}
		if stuck.first(cause(err, id), time.Now()) {
			logStuck(cfg, m, err)
		}
		return err
	}
}

// watermillUUID is the default IDFunc: the message's Watermill UUID.
func watermillUUID(m *message.Message) (string, error) {
	if m.UUID == "" {
		return "", errors.New("the message has no Watermill UUID, the default dedupe key: its producer is not pgbox's relay (which sets it to the outbox id) " +
			"nor Watermill; set watermillinbox.Config.IDFunc to take the key from a header (MetadataID) or the payload (PayloadID)")
	}
	return m.UUID, nil
}

// errNoKey marks the errors of a message Config.IDFunc gives no dedupe key.
var errNoKey = errors.New("no dedupe key")

// store receives m into the inbox, with the messages of concurrent calls
// (g), and returns the dedupe key it used; see Handler for the error it
// returns.
func store(cfg Config, g *group, m *message.Message) (id string, err error) {
	id, err = cfg.IDFunc(m)
	if err == nil && id == "" {
		err = errors.New("Config.IDFunc returned an empty key")
	}
	if err != nil {
		return "", fmt.Errorf("watermillinbox: %w: %w: %v", inbox.ErrInvalidMessage, errNoKey, err)
	}
	var idTime time.Time
	if cfg.IDTimeFunc != nil {
		idTime = cfg.IDTimeFunc(m)
	}
	err = g.receive(m.Context(), inbox.Message{
		EventType:   cfg.EventTypeFunc(m),
		ID:          id,
		IDTime:      idTime,
		Metadata:    m.Metadata,
		OrderingKey: cfg.OrderingKeyFunc(m),
		Payload:     m.Payload,
	}).Err
	if errors.Is(err, inbox.ErrPayloadConflict) {
		cfg.Logger.ErrorContext(m.Context(), "watermillinbox: conflicting redelivery acknowledged and recorded, not applied",
			slog.String("consumer", cfg.Inbox.Consumer()), slog.String("message_id", id), slog.String("error", err.Error()))
		return id, nil
	}
	if err != nil {
		return id, fmt.Errorf("watermillinbox: %w", err)
	}
	return id, nil
}

// poison publishes m, which can never be stored because of err, to the
// poison topic, and reports whether it may be acknowledged.
func poison(cfg Config, m *message.Message, err error) error {
	p := m.Copy()
	p.Metadata.Set(middleware.ReasonForPoisonedKey, err.Error())
	p.Metadata.Set(middleware.PoisonedTopicKey, message.SubscribeTopicFromCtx(m.Context()))
	if perr := cfg.PoisonPublisher.Publish(cfg.PoisonTopic, p); perr != nil {
		return fmt.Errorf("%w; and publishing it to poison topic %q failed: %v", err, cfg.PoisonTopic, perr)
	}
	cfg.Logger.ErrorContext(m.Context(), "watermillinbox: a message that can never be stored was moved to the poison topic and acknowledged",
		slog.String("consumer", cfg.Inbox.Consumer()), slog.String("poison_topic", cfg.PoisonTopic),
		slog.String("watermill_uuid", m.UUID), slog.String("error", err.Error()))
	return nil
}

func defaultEventType(m *message.Message) string {
	if t := m.Metadata.Get(pgbox.MetadataEventType); t != "" {
		return t
	}
	return message.SubscribeTopicFromCtx(m.Context())
}
