// Package natsjs publishes Watermill messages to NATS JetStream, sending
// the messages of a call without waiting for each one's acknowledgement
// and then waiting for them all: one round trip to the server per call
// rather than one per message. Its Publisher is a relay.ResultPublisher,
// so that a relay publishes each topic's rows of a batch in one call and
// still learns which messages JetStream took.
//
// Messages are marshaled as watermill-nats (v2) marshals them, subject =
// topic, so that watermill-nats's JetStream subscriber, with its default
// stream configuration (a stream named after the topic and bound to it),
// reads them: the message's UUID in the _watermill_message_uuid header and
// its metadata as headers. The UUID also goes in the Nats-Msg-Id header,
// so JetStream drops a message published again within the stream's
// duplicate window (2 minutes by default).
package natsjs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgbox/pgbox/relay"
)

// AckTimeoutDefault is the default Config.AckTimeout.
const AckTimeoutDefault = 5 * time.Second

// Config configures a Publisher.
type Config struct {
	// AckTimeout is how long a call waits for JetStream's
	// acknowledgements of its messages once it has sent them. A message
	// not acknowledged by then fails with an error wrapping
	// relay.ErrBrokerUnreachable; JetStream may still store it, and a
	// message published again is dropped as a duplicate within the
	// stream's duplicate window. Keep it under the relay's
	// Config.PublishTimeout, so that the publisher answers before the
	// relay stops waiting. Defaults to AckTimeoutDefault (5 seconds).
	AckTimeout time.Duration
}

// Publisher publishes to NATS JetStream on a connection its caller owns.
// It is safe for concurrent use. Errors that say JetStream could not be
// reached (the connection lost, closed or reconnecting, a request that
// timed out, no acknowledgement within Config.AckTimeout, too many
// messages awaiting acknowledgement) wrap relay.ErrBrokerUnreachable, so
// that a relay pauses instead of charging its rows attempts.
type Publisher struct {
	ackTimeout time.Duration
	js         jetstream.JetStream
}

var _ relay.ResultPublisher = (*Publisher)(nil)

// NewPublisher returns a Publisher on nc, a connection to a NATS server
// with JetStream enabled. The streams must exist, each bound to the
// subjects of the topics published to it. Close leaves nc open.
func NewPublisher(nc *nats.Conn, cfg Config) (*Publisher, error) {
	if nc == nil {
		return nil, errors.New("natsjs: the connection is nil: give a *nats.Conn (nats.Connect)")
	}
	if cfg.AckTimeout < 0 {
		return nil, fmt.Errorf("natsjs: Config.AckTimeout is %s: it must be positive, or 0 for the default (%s)", cfg.AckTimeout, AckTimeoutDefault)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsjs: %w", err)
	}
	return &Publisher{ackTimeout: cmp.Or(cfg.AckTimeout, AckTimeoutDefault), js: js}, nil
}

// Publish publishes msgs to topic (the subject) and waits for
// JetStream's acknowledgement of each. If any fails, it returns an error
// saying how many, and the first one's reason; the others were published.
// A relay uses PublishResults instead, which tells them apart.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return relay.ResultsError("natsjs", topic, p.PublishResults(topic, msgs...))
}

// PublishResults publishes msgs to topic (the subject), sending them all
// before waiting for any acknowledgement, and returns each message's
// error, nil for a message JetStream acknowledged (stored, or dropped as
// a duplicate of one it stored).
func (p *Publisher) PublishResults(topic string, msgs ...*message.Message) []error {
	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		nm := &nats.Msg{Subject: topic, Data: m.Payload, Header: make(nats.Header, len(m.Metadata)+2)}
		for k, v := range m.Metadata {
			nm.Header.Set(k, v)
		}
		nm.Header.Set(wmnats.WatermillUUIDHdr, m.UUID)
		nm.Header.Set(jetstream.MsgIDHeader, m.UUID)
		futures[i], errs[i] = p.js.PublishMsgAsync(nm)
		if errs[i] != nil {
			errs[i] = wrap(errs[i])
		}
	}
	timeout := time.NewTimer(p.ackTimeout)
	defer timeout.Stop()
	expired := false
	for i, f := range futures {
		if f == nil {
			continue
		}
		if expired { // take only the answers already there
			select {
			case <-f.Ok():
			case err := <-f.Err():
				errs[i] = wrap(err)
			default:
				errs[i] = p.noAck()
			}
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = wrap(err)
		case <-timeout.C:
			expired = true
			errs[i] = p.noAck()
		}
	}
	return errs
}

// noAck is the error of a message not acknowledged within AckTimeout.
func (p *Publisher) noAck() error {
	return fmt.Errorf("natsjs: no acknowledgement from JetStream within %s (Config.AckTimeout): %w", p.ackTimeout, relay.ErrBrokerUnreachable)
}

// wrap marks the errors that say JetStream could not be reached with
// relay.ErrBrokerUnreachable.
func wrap(err error) error {
	if errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
		return fmt.Errorf("natsjs: %w (%w)", err, relay.ErrBrokerUnreachable)
	}
	return fmt.Errorf("natsjs: %w", err)
}

// Close does nothing: the connection is the caller's to close. Calls
// still waiting for acknowledgements get them, or time out.
func (p *Publisher) Close() error { return nil }
