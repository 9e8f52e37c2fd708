package watermillinbox_test

import (
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/watermillinbox"
)

// UUIDOr keys a message by its Watermill UUID when it has one, whatever
// the fallback would say, and by the fallback otherwise, its refusal
// included.
func TestUUIDOr(t *testing.T) {
	t.Parallel()
	id := watermillinbox.UUIDOr(watermillinbox.MetadataID("broker-id"))

	pgboxMsg := message.NewMessage("0190b6c2-8d5e-7cc1-a5a4-7d6c0e7b0d11", nil)
	pgboxMsg.Metadata.Set("broker-id", "a republish's new broker id")
	key, err := id(pgboxMsg)
	require.NoError(t, err)
	require.Equal(t, "0190b6c2-8d5e-7cc1-a5a4-7d6c0e7b0d11", key)

	foreign := message.NewMessage("", nil)
	foreign.Metadata.Set("broker-id", "b-1")
	key, err = id(foreign)
	require.NoError(t, err)
	require.Equal(t, "b-1", key)

	_, err = id(message.NewMessage("", nil))
	require.ErrorContains(t, err, `metadata "broker-id" is missing`)
}

// A queue that carries pgbox's messages and a foreign producer's: pgbox's
// are keyed by their outbox id, the others by the broker's message id
// (on SQS, sqs.MetadataMessageID).
func ExampleUUIDOr() {
	id := watermillinbox.UUIDOr(watermillinbox.MetadataID("sqs_message_id"))

	fromRelay := message.NewMessage("0190b6c2-8d5e-7cc1-a5a4-7d6c0e7b0d11", []byte(`{"order":1}`))
	fromRelay.Metadata.Set("sqs_message_id", "5fea7756-0ea4-451a-a703-a558b933e274")
	foreign := message.NewMessage("", []byte(`{"order":2}`))
	foreign.Metadata.Set("sqs_message_id", "9b2f0c3e-1d4a-4e7b-8f6a-2c5d3e4f5a6b")

	for _, m := range []*message.Message{fromRelay, foreign} {
		key, err := id(m)
		fmt.Println(key, err)
	}
	// Output:
	// 0190b6c2-8d5e-7cc1-a5a4-7d6c0e7b0d11 <nil>
	// 9b2f0c3e-1d4a-4e7b-8f6a-2c5d3e4f5a6b <nil>
}
