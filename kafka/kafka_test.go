package kafka_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/kafka"
)

// A message that watermill-kafka did not read, or no router handed over,
// has no place: OffsetID says where it takes one from, and RecordTime
// leaves it undated.
func TestNoRecord(t *testing.T) {
	t.Parallel()
	m := message.NewMessage("", []byte(`{}`))
	_, err := kafka.OffsetID(m)
	require.ErrorContains(t, err, "OffsetID takes them from a message watermill-kafka's subscriber read, handed over by a Watermill router")
	require.True(t, kafka.RecordTime(m).IsZero())
}
