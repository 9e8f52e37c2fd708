package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgbox/pgbox/relay"
)

// A produce error is unreachable when Kafka could not take the record in
// time, whatever error the client last saw on its retries; a refusal of
// the record (its size, its topic) is not.
func TestFranzErrorUnreachable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err         error
		unreachable bool
	}{
		{context.DeadlineExceeded, true},
		{context.Canceled, true},
		{kgo.ErrRecordTimeout, true},
		{fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.UnknownTopicOrPartition), true},
		{kgo.ErrRecordRetries, true},
		{kgo.ErrClientClosed, true},
		{kerr.NotLeaderForPartition, true},
		{kerr.RequestTimedOut, true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{kerr.UnknownTopicOrPartition, false},
		{kerr.UnknownTopicID, false},
		{kerr.MessageTooLarge, false},
		{kerr.TopicAuthorizationFailed, false},
		{errors.New("something else"), false},
	} {
		err := fmt.Errorf("kafka: produce message x to %q: %w", "t", franzError{tc.err})
		require.Equal(t, tc.unreachable, relay.IsUnreachable(err), "%v", tc.err)
	}
}
