package outbox

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/pgbox/pgbox/internal/pgtext"
)

// MaxTextBytes is the longest topic, event type or ordering key accepted,
// in bytes.
const MaxTextBytes = 255

// ErrInvalidMessage is wrapped by every error about a message the outbox
// refuses to write. Nothing is written when Write returns it.
var ErrInvalidMessage = errors.New("invalid outbox message")

// Message is a message to publish once the business transaction commits.
type Message struct {
	// EventType routes the message to a handler on the consuming side. It
	// is published in the metadata under pgbox.MetadataEventType. Defaults
	// to Topic.
	EventType string

	// ID is the message's id, published as its Watermill UUID, which the
	// consumer dedupes on. Leave it zero for a new UUIDv7 (time-ordered,
	// which keeps the table's index compact); set it to make a retried
	// business transaction produce the same message id.
	ID uuid.UUID

	// Metadata is published with the message. The trace context of the
	// writing context is added to it.
	Metadata map[string]string

	// OrderingKey, when set, makes the relay publish the messages that share
	// it one at a time, in the order their transactions committed. It is
	// published under pgbox.MetadataOrderingKey, for the consumer's inbox.
	OrderingKey string

	// Payload is the message body, published byte for byte.
	Payload []byte

	// Topic is where the relay publishes the message. Required.
	Topic string
}

func (o *Outbox) validate(i int, m *Message) error {
	bad := func(reason string) error {
		return fmt.Errorf("%w %d (topic %q): %s", ErrInvalidMessage, i, m.Topic, reason)
	}
	if err := pgtext.Check("Topic", m.Topic, MaxTextBytes, true); err != nil {
		return bad(err.Error())
	}
	if err := pgtext.Check("EventType", m.EventType, MaxTextBytes, false); err != nil {
		return bad(err.Error())
	}
	if err := pgtext.Check("OrderingKey", m.OrderingKey, MaxTextBytes, false); err != nil {
		return bad(err.Error())
	}
	if limit := o.cfg.MaxPayloadBytes; limit > 0 && len(m.Payload) > limit {
		return bad(fmt.Sprintf("payload is %d bytes, over the %d-byte limit (outbox.Config.MaxPayloadBytes): store large bodies elsewhere and send a reference", len(m.Payload), limit))
	}
	if err := pgtext.CheckMetadata(m.Metadata); err != nil {
		return bad(err.Error())
	}
	return nil
}
