package watermillinbox

import "github.com/ThreeDotsLabs/watermill/message"

// UUIDOr returns an IDFunc that takes the message's Watermill UUID, the
// default key, and, for a message without one (a foreign producer's),
// the key fallback returns. It suits a queue that carries both pgbox's
// messages and a foreign producer's: pgbox's are deduped on their outbox
// id whatever broker-assigned id a republish got. On Amazon SQS:
//
//	IDFunc: watermillinbox.UUIDOr(watermillinbox.MetadataID(sqs.MetadataMessageID))
func UUIDOr(fallback func(*message.Message) (string, error)) func(*message.Message) (string, error) {
	return func(m *message.Message) (string, error) {
		if m.UUID != "" {
			return m.UUID, nil
		}
		return fallback(m)
	}
}
