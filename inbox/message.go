package inbox

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtext"
)

// MaxTextBytes is the longest message id, event type, ordering key or
// consumer name the inbox accepts, in bytes. A longer business key can be
// hashed into an id.
const MaxTextBytes = 255

// The IDTimes a message may carry: day 1 (day 0 and before would read as
// the generations' buckets) to the end of the year 9999.
var (
	minIDTime = partition.Day(1).Time()
	maxIDTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Message is one message delivered to a consumer.
type Message struct {
	// EventType routes the message to a dispatcher handler, such as
	// "OrderPlaced". Required.
	EventType string

	// ID is the dedupe key: every delivery of the same message must carry
	// the same ID, and distinct messages distinct IDs. A broker's message id
	// (a Watermill UUID, an outbox row id) or a business key such as
	// "order-17/placed" both work. Required; at most MaxTextBytes bytes of
	// UTF-8.
	ID string

	// IDTime is the time fixed with the id: every delivery of this ID
	// carries the same IDTime. That is a promise the caller makes, as it
	// makes the ID's: a broker's send or publish time (an SQS message's
	// SentTimestamp, a Kafka record's timestamp, a Pub/Sub publish time) or
	// an event's own time keeps it; a time read from a clock at each
	// delivery breaks it.
	//
	// It dates the id: the message goes to the partition of IDTime's UTC
	// day, as a UUIDv7 goes to the day it was made on, where keeping it
	// costs the hot paths nothing and retention drops it with its day.
	// Without it (the zero Time) an id that is no UUIDv7 is undated and is
	// kept in the inbox's generations, at the cost of an index of random
	// ids. A redelivery whose IDTime is off by less than a day from the
	// first delivery's is still found, if the first one has committed by
	// then (docs/design.md, "Dated foreign ids").
	//
	// A canonical UUIDv7 ID is dated by its own time, and IDTime is
	// ignored for it. Optional; it must be after 1970-01-01 and before
	// the year 10000.
	IDTime time.Time

	// MaxAttempts overrides Config.MaxAttempts for this message. Zero means
	// the consumer's default.
	MaxAttempts int

	// Metadata carries headers such as trace context. Values must be valid
	// UTF-8 without NUL, because they are stored as JSON.
	Metadata map[string]string

	// OrderingKey, when set, makes the dispatcher handle the consumer's
	// messages that share it one at a time, in the order they were received.
	// Messages without a key run in parallel.
	OrderingKey string

	// Payload is the message body. Its bytes are stored and handed to the
	// handler exactly as given.
	Payload []byte
}

// validate reports the first thing wrong with m, naming the field and what
// to do about it. The error wraps ErrInvalidMessage.
func (in *Inbox) validate(m *Message) error {
	if err := checkText("ID", m.ID, true); err != nil {
		return invalid(m.ID, err.Error())
	}
	if err := checkText("EventType", m.EventType, true); err != nil {
		return invalid(m.ID, err.Error()+" so the dispatcher can route the message")
	}
	if err := checkText("OrderingKey", m.OrderingKey, false); err != nil {
		return invalid(m.ID, err.Error())
	}
	if limit := in.cfg.MaxPayloadBytes; limit > 0 && len(m.Payload) > limit {
		return invalid(m.ID, fmt.Sprintf("payload is %d bytes, over the %d-byte limit (inbox.Config.MaxPayloadBytes): store large bodies elsewhere and send a reference", len(m.Payload), limit))
	}
	if !m.IDTime.IsZero() && (m.IDTime.Before(minIDTime) || !m.IDTime.Before(maxIDTime)) {
		return invalid(m.ID, fmt.Sprintf("IDTime is %s: use a time from 1970-01-02 to 9999-12-31 (UTC) that every delivery of the id carries, or the zero Time for none",
			m.IDTime.UTC().Format(time.RFC3339Nano)))
	}
	if m.MaxAttempts < 0 {
		return invalid(m.ID, fmt.Sprintf("MaxAttempts is %d: use 0 for the consumer's default or a positive number", m.MaxAttempts))
	}
	if err := pgtext.CheckMetadata(m.Metadata); err != nil {
		return invalid(m.ID, err.Error())
	}
	return nil
}

// checkText validates a field bound for one of the inbox's text columns.
func checkText(field, s string, required bool) error {
	return pgtext.Check(field, s, MaxTextBytes, required)
}

func invalid(id, reason string) error {
	if id == "" || len(id) > MaxTextBytes || !utf8.ValidString(id) {
		return fmt.Errorf("%w: %s", ErrInvalidMessage, reason)
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidMessage, id, reason)
}

// encodeMetadata returns m's metadata as a JSON object.
func encodeMetadata(md map[string]string) string {
	if len(md) == 0 {
		return "{}"
	}
	b, err := json.Marshal(md)
	if err != nil {
		panic(err) // a map[string]string of valid UTF-8 always encodes
	}
	return string(b)
}
