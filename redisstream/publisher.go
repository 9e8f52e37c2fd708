// Package redisstream publishes Watermill messages to Redis Streams,
// sending the XADDs of a call's messages in one pipeline: one round trip
// to Redis per call rather than one per message. Its Publisher is a
// relay.ResultPublisher, so that a relay publishes each topic's rows of a
// batch in one call and still learns which messages Redis took.
//
// Messages are written as watermill-redisstream's publisher writes them,
// stream = topic, through the same Marshaller (its
// DefaultMarshallerUnmarshaller unless the config gives another) and with
// the same length limits (Maxlens, DefaultMaxlen, trimmed approximately),
// so that watermill-redisstream's Subscriber reads them unchanged.
package redisstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/pgbox/pgbox/relay"
)

// PublisherConfig configures a Publisher. Its fields but OwnsClient are
// those of watermill-redisstream's PublisherConfig, with the same meaning.
type PublisherConfig struct {
	// Client is the Redis client the publisher sends its XADDs through: a
	// *redis.Client, *redis.ClusterClient or any redis.UniversalClient.
	// Its timeouts (DialTimeout, ReadTimeout, WriteTimeout) and retries
	// (MaxRetries) bound a call: Publish takes no context. Required.
	Client redis.UniversalClient

	// DefaultMaxlen is the length, in entries, to which a stream not named
	// in Maxlens is trimmed at each XADD, approximately (MAXLEN ~): Redis
	// trims whole nodes of the stream, so it may keep a few more. Entries
	// trimmed before a consumer group read them are never delivered: set
	// it well above the backlog the consumers may fall behind by. Defaults
	// to 0, no limit.
	DefaultMaxlen int64

	// Marshaller turns a message into the fields of its stream entry.
	// Defaults to watermill-redisstream's DefaultMarshallerUnmarshaller,
	// the format its Subscriber's default Unmarshaller reads.
	Marshaller wmredis.Marshaller

	// Maxlens is the length to which each stream named in it is trimmed,
	// as DefaultMaxlen for the others; 0 means no limit for that stream.
	// The publisher keeps a copy: changes after NewPublisher do not apply.
	// Defaults to none.
	Maxlens map[string]int64

	// OwnsClient makes Close close Client. watermill-redisstream's
	// Publisher always closes its client; this one does only when told
	// to, so that one client can serve it and a subscriber, or the rest
	// of a program. Defaults to false: the client is the caller's to
	// close.
	OwnsClient bool
}

// Publisher publishes to Redis Streams, a call's messages in one pipeline.
// It is safe for concurrent use. Errors that say Redis could not be reached
// or cannot take writes for now (a refused, reset or timed-out connection,
// a closed client, a server loading its data, a read-only replica, a
// server out of memory or refusing the credentials) wrap
// relay.ErrBrokerUnreachable, so that a relay pauses instead of charging
// its rows attempts; Redis's refusal of one message (WRONGTYPE: its
// stream's key holds something else) does not. The client reconnects by
// itself once Redis is back.
type Publisher struct {
	client     redis.UniversalClient
	defaultMax int64
	marshaller wmredis.Marshaller
	maxlens    map[string]int64
	ownsClient bool

	closeOnce sync.Once
	closeErr  error
}

var _ relay.ResultPublisher = (*Publisher)(nil)

// NewPublisher returns a Publisher configured by cfg.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, errors.New("redisstream: PublisherConfig.Client is nil: give a Redis client (redis.NewClient(opts), opts from redis.ParseURL)")
	}
	if cfg.DefaultMaxlen < 0 {
		return nil, fmt.Errorf("redisstream: PublisherConfig.DefaultMaxlen is %d: give a stream length in entries, or 0 for no limit", cfg.DefaultMaxlen)
	}
	for topic, n := range cfg.Maxlens {
		if n < 0 {
			return nil, fmt.Errorf("redisstream: PublisherConfig.Maxlens[%q] is %d: give a stream length in entries, or 0 for no limit", topic, n)
		}
	}
	p := &Publisher{
		client:     cfg.Client,
		defaultMax: cfg.DefaultMaxlen,
		marshaller: cfg.Marshaller,
		maxlens:    maps.Clone(cfg.Maxlens),
		ownsClient: cfg.OwnsClient,
	}
	if p.marshaller == nil {
		p.marshaller = wmredis.DefaultMarshallerUnmarshaller{}
	}
	return p, nil
}

// Publish publishes msgs to topic (the stream), in order, in one pipeline.
// If any fails, it returns an error saying how many, and the first one's
// reason; the others were published. A relay uses PublishResults instead,
// which tells them apart.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return relay.ResultsError("redisstream", topic, p.PublishResults(topic, msgs...))
}

// PublishResults publishes msgs to topic (the stream), in order, sending
// their XADDs in one pipeline, and returns each message's error: nil for
// a message Redis appended to the stream. A message the Marshaller
// rejects is not sent; the others are. go-redis sends a pipeline again,
// whole, after a connection lost while it read the replies (up to the
// client's MaxRetries): Redis may then hold a message twice, under one
// UUID, which consumers dedupe as they dedupe a republished row.
func (p *Publisher) PublishResults(topic string, msgs ...*message.Message) []error {
	errs := make([]error, len(msgs))
	maxlen, ok := p.maxlens[topic]
	if !ok {
		maxlen = p.defaultMax
	}
	// The messages' contexts are not the pipeline's: it has one, and the
	// client's timeouts bound it.
	ctx := context.Background()
	pipe := p.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	for i, m := range msgs {
		values, err := p.marshaller.Marshal(topic, m)
		if err != nil {
			errs[i] = fmt.Errorf("redisstream: message %s to stream %q not sent: marshal: %w", m.UUID, topic, err)
			continue
		}
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: values, MaxLen: maxlen, Approx: true})
	}
	if pipe.Len() == 0 {
		return errs
	}
	// A command holds its own error, but not always: when the client
	// cannot connect (Redis down), go-redis fails Exec without setting
	// any command's error. So a message is published only if its XADD
	// returned an entry id; one without an id or an error of its own gets
	// Exec's, why nothing answered.
	_, execErr := pipe.Exec(ctx)
	for i, c := range cmds {
		switch {
		case c == nil || c.Err() == nil && c.Val() != "":
		default:
			errs[i] = xaddError(topic, msgs[i].UUID, cmp.Or(c.Err(), execErr, errNoReply))
		}
	}
	return errs
}

// errNoReply is the error of an XADD that go-redis neither answered nor
// failed, with no error from Exec either: not expected, but such a
// message is never taken for published.
var errNoReply = errors.New("no reply from Redis")

// xaddError is the error of a message whose XADD to topic failed with
// err, marked relay.ErrBrokerUnreachable when err says Redis could not
// take it for now.
func xaddError(topic, uuid string, err error) error {
	switch {
	case unreachable(err):
		return fmt.Errorf("redisstream: XADD of message %s to stream %q: %w (%w)", uuid, topic, err, relay.ErrBrokerUnreachable)
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return fmt.Errorf("redisstream: XADD of message %s to stream %q: %w (the key %q holds something other than a stream: delete or rename it, or publish to another topic)",
			uuid, topic, err, topic)
	default:
		return fmt.Errorf("redisstream: XADD of message %s to stream %q: %w", uuid, topic, err)
	}
}

// unavailablePrefixes begin the errors by which Redis refuses every
// write for a while, whatever the message: the server is loading its
// data (LOADING), is a replica (READONLY, after a failover, until the
// client finds the new primary), has lost its primary or cluster
// (MASTERDOWN, CLUSTERDOWN, TRYAGAIN), runs a script (BUSY), lacks the
// replicas min-replicas-to-write asks for (NOREPLICAS), is full (OOM,
// with maxmemory and no eviction), refuses the credentials (NOAUTH,
// WRONGPASS) or takes no more clients. Charging the messages attempts for
// these would kill them all. (Each with the space after its code:
// BUSYGROUP, say, is another error.)
var unavailablePrefixes = []string{
	"LOADING ", "READONLY ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ", "BUSY ", "NOREPLICAS ", "OOM ",
	"NOAUTH ", "WRONGPASS ", "max number of clients reached",
}

// unreachable reports whether err says Redis could not be reached or
// cannot take writes for now.
func unreachable(err error) bool {
	if relay.IsUnreachable(err) || errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, redis.ErrPoolExhausted) {
		return true
	}
	for _, prefix := range unavailablePrefixes {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// Close closes the client if PublisherConfig.OwnsClient says the publisher
// owns it, which ends the calls in progress with an error and fails those
// after it; otherwise it does nothing. Calling it again returns the first
// call's result.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		if p.ownsClient {
			p.closeErr = p.client.Close()
		}
	})
	return p.closeErr
}
