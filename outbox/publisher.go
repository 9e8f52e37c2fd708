package outbox

import (
	"context"
	"fmt"
	"maps"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
)

// Publisher returns a Watermill publisher that writes into the outbox inside
// tx, so existing Watermill producer code becomes transactional: what it
// publishes reaches the broker (through the relay) if and only if tx
// commits. The publisher is valid for tx's lifetime; Close does nothing.
//
// A message's UUID becomes its outbox id, so it must be a UUID; an empty
// UUID is given a new UUIDv7, written back to the message. The metadata
// keys pgbox.MetadataEventType and pgbox.MetadataOrderingKey set the event
// type and ordering key.
func (o *Outbox) Publisher(ctx context.Context, tx pgx.Tx) message.Publisher {
	return &txPublisher{ctx: ctx, o: o, tx: tx}
}

type txPublisher struct {
	ctx context.Context
	o   *Outbox
	tx  pgx.Tx
}

// Publish writes msgs to the outbox for topic.
func (p *txPublisher) Publish(topic string, msgs ...*message.Message) error {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		var id uuid.UUID
		if m.UUID != "" {
			var err error
			if id, err = uuid.Parse(m.UUID); err != nil {
				return fmt.Errorf("%w %d: UUID %q is not a UUID, and it becomes the outbox id: use watermill.NewUUID() or leave it empty", ErrInvalidMessage, i, m.UUID)
			}
		}
		md := maps.Clone(map[string]string(m.Metadata))
		delete(md, pgbox.MetadataEventType)
		delete(md, pgbox.MetadataOrderingKey)
		out[i] = Message{
			EventType:   m.Metadata.Get(pgbox.MetadataEventType),
			ID:          id,
			Metadata:    md,
			OrderingKey: m.Metadata.Get(pgbox.MetadataOrderingKey),
			Payload:     m.Payload,
			Topic:       topic,
		}
	}
	ids, err := p.o.Write(p.ctx, p.tx, out...)
	if err != nil {
		return err
	}
	for i, m := range msgs {
		m.UUID = ids[i].String()
	}
	return nil
}

// Close does nothing: the transaction belongs to the caller.
func (p *txPublisher) Close() error { return nil }

var _ message.Publisher = (*txPublisher)(nil)
