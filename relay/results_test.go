package relay_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// shortResults is a relay.ResultPublisher that breaks its contract: it
// returns no result at all.
type shortResults struct{ recorder }

func (p *shortResults) PublishResults(string, ...*message.Message) []error { return nil }

// A ResultPublisher that does not return one result per message has
// published none as far as the relay knows: each row is charged, with an
// error that names the publisher's fault, never recorded published.
func TestResultPublisherWithoutAResultPerMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, outbox.Message{Topic: "orders"}, outbox.Message{Topic: "orders"})
	b.start(t, relay.Config{Publisher: &shortResults{}, MaxAttempts: 1, Workers: 1})
	b.waitFor(t, `SELECT count(*) = 2 FROM /* schema */outbox
		WHERE status = 'dead' AND last_error LIKE '%PublishResults returned 0 results for 2 messages; it must return one per message%'`)
}

// ResultsError is nil when every message went out, and otherwise counts
// the failures and keeps the first one findable, an outage included.
func TestResultsError(t *testing.T) {
	t.Parallel()
	require.NoError(t, relay.ResultsError("nats", "orders", []error{nil, nil}))

	refused := errors.New("refused")
	err := relay.ResultsError("nats", "orders", []error{nil, fmt.Errorf("down: %w", relay.ErrBrokerUnreachable), refused})
	require.EqualError(t, err, `nats: 2 of 3 messages to "orders" not published (the first one's error follows; any others were published): down: broker unreachable`)
	require.True(t, relay.IsUnreachable(err))
	require.NotErrorIs(t, err, refused, "only the first failure is wrapped")
}
