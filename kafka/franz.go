package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"time"

	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgbox/pgbox/relay"
)

// FranzConfig configures a FranzPublisher.
type FranzConfig struct {
	// Client produces the records; required. Its options decide their
	// durability (kgo.RequiredAcks: all in-sync replicas by default, and
	// idempotent), where a key's records go (kgo.RecordPartitioner:
	// franz-go's default hashes keys as Kafka's Java client does, Sarama
	// another way; see SaramaPartitioner) and whether a topic is created
	// on its first record (kgo.AllowAutoTopicCreation; franz-go does not
	// by default, where Sarama does: a record to a topic that does not
	// exist then fails, and the relay charges it an attempt). The
	// publisher neither configures nor closes it: close it after the
	// relay has stopped.
	Client *kgo.Client
	// Timeout is how long a Publish call waits for Kafka to acknowledge
	// its records. Records still unacknowledged then fail with
	// context.DeadlineExceeded, which a relay counts as the broker
	// unreachable, charging no attempt; the client may still deliver
	// them later, as a relay may publish a message again. Keep it below
	// the relay's Config.PublishTimeout (30 seconds by default), past
	// which the relay gives the call up as hung. Defaults to 10 seconds.
	Timeout time.Duration
}

// FranzPublisher publishes Watermill messages to Kafka through a franz-go
// client, as records that watermill-kafka's subscriber reads with
// Marshaler(): the payload as the value, the message's id in the
// wmkafka.UUIDHeaderKey header, each metadata entry as a header of its
// own, keyed by Key. It is a relay.ResultPublisher: a call's records are
// produced together and acknowledged in one wait, and each message has
// its own outcome. It costs the relay's process about a fifth less CPU a
// message than Publisher's Sarama producer (docs/benchmarks.md). It is
// safe for concurrent use.
type FranzPublisher struct {
	cfg    FranzConfig
	closed atomic.Bool
}

var _ relay.ResultPublisher = (*FranzPublisher)(nil)

// NewFranzPublisher returns a FranzPublisher, or an error if cfg.Client
// is nil or cfg.Timeout negative.
func NewFranzPublisher(cfg FranzConfig) (*FranzPublisher, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("kafka: FranzConfig.Client is nil: give a *kgo.Client made with kgo.NewClient(kgo.SeedBrokers(...))")
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("kafka: FranzConfig.Timeout is %s: give a positive duration, or 0 for 10 seconds", cfg.Timeout)
	case cfg.Timeout == 0:
		cfg.Timeout = 10 * time.Second
	}
	return &FranzPublisher{cfg: cfg}, nil
}

// Publish publishes msgs to topic and returns once Kafka has acknowledged
// each. If any fails, it returns an error saying how many, and the first
// one's reason; the others were published. A relay uses PublishResults
// instead, which tells them apart.
func (p *FranzPublisher) Publish(topic string, msgs ...*message.Message) error {
	return relay.ResultsError("kafka", topic, p.PublishResults(topic, msgs...))
}

// PublishResults publishes msgs to topic, producing them together, and
// returns each message's error, in the order of msgs: nil for a message
// Kafka acknowledged. A message whose metadata holds
// wmkafka.UUIDHeaderKey is refused, as watermill-kafka's marshaler does.
// Errors that say Kafka could not be reached in time (the Timeout, the
// client's record timeout or retries, a retriable broker error) are
// unreachable to relay.IsUnreachable; a refusal (a record too large, a
// topic that does not exist or is not allowed) is not.
func (p *FranzPublisher) PublishResults(topic string, msgs ...*message.Message) []error {
	errs := make([]error, len(msgs))
	if p.closed.Load() {
		for i := range errs {
			errs[i] = fmt.Errorf("kafka: %w", relay.ErrPublisherClosed)
		}
		return errs
	}
	records := make([]*kgo.Record, 0, len(msgs))
	index := make([]int, 0, len(msgs)) // records[j] is msgs[index[j]]
	for i, msg := range msgs {
		record, err := franzRecord(topic, msg)
		if err != nil {
			errs[i] = fmt.Errorf("kafka: message %s: %w", msg.UUID, err)
			continue
		}
		records, index = append(records, record), append(index, i)
	}
	if len(records) == 0 {
		return errs
	}
	for j, err := range p.produce(msgs[index[0]].Context(), records) {
		if err != nil {
			i := index[j]
			errs[i] = fmt.Errorf("kafka: produce message %s to %q: %w", msgs[i].UUID, topic, franzError{err})
		}
	}
	return errs
}

// produce produces records together, with no linger (ProduceSync), and
// returns each one's error, in their order, once every one is
// acknowledged or failed, or at the Timeout: a record still out then
// fails with context.DeadlineExceeded. The client fails such a record
// itself where it safely can (none of it sent yet); one it cannot may
// still reach Kafka later, as a relay's republished message may.
func (p *FranzPublisher) produce(ctx context.Context, records []*kgo.Record) []error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	done := make(chan kgo.ProduceResults, 1) // never blocks, even after the Timeout
	go func() { done <- p.cfg.Client.ProduceSync(ctx, records...) }()
	errs := make([]error, len(records))
	select {
	case results := <-done:
		return settled(records, results)
	case <-ctx.Done():
		select {
		case results := <-done: // settled as the time ran out
			return settled(records, results)
		default:
		}
		for j := range errs {
			errs[j] = ctx.Err()
		}
	}
	return errs
}

// settled returns the error of each of records, in their order, from
// results, which are in the order the records settled.
func settled(records []*kgo.Record, results kgo.ProduceResults) []error {
	index := make(map[*kgo.Record]int, len(records))
	for j, r := range records {
		index[r] = j
	}
	errs := make([]error, len(records))
	for _, res := range results {
		errs[index[res.Record]] = res.Err
	}
	return errs
}

// franzRecord is msg as a record on topic, in the shape of
// watermill-kafka's marshaler, keyed by Key.
func franzRecord(topic string, msg *message.Message) (*kgo.Record, error) {
	if msg.Metadata.Get(wmkafka.UUIDHeaderKey) != "" {
		return nil, fmt.Errorf("metadata %s is reserved for the message's id", wmkafka.UUIDHeaderKey)
	}
	key, err := Key(topic, msg)
	if err != nil {
		return nil, err
	}
	headers := make([]kgo.RecordHeader, 1, 1+len(msg.Metadata))
	headers[0] = kgo.RecordHeader{Key: wmkafka.UUIDHeaderKey, Value: []byte(msg.UUID)}
	for k, v := range msg.Metadata {
		headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: msg.Payload, Headers: headers}, nil
}

// franzError is a produce error, unreachable if it says that Kafka could
// not take the record in time rather than that it refused it.
type franzError struct{ err error }

func (e franzError) Error() string { return e.err.Error() }
func (e franzError) Unwrap() error { return e.err }

// Unreachable reports whether the record failed for want of a broker to
// take it: a timeout or cancellation, the client's record timeout or
// retries running out, the client closed under the publisher, a
// retriable broker error other than a topic that does not exist, or a
// network error.
func (e franzError) Unreachable() bool {
	if errors.Is(e.err, context.DeadlineExceeded) || errors.Is(e.err, context.Canceled) ||
		errors.Is(e.err, kgo.ErrRecordTimeout) || errors.Is(e.err, kgo.ErrRecordRetries) ||
		errors.Is(e.err, kgo.ErrClientClosed) {
		return true
	}
	if errors.Is(e.err, kerr.UnknownTopicOrPartition) || errors.Is(e.err, kerr.UnknownTopicID) {
		return false // retriable to Kafka, while a topic is made; a refusal here
	}
	var ke *kerr.Error
	if errors.As(e.err, &ke) {
		return ke.Retriable
	}
	return relay.IsUnreachable(e.err)
}

// Close makes later calls fail; the client is the caller's to close.
func (p *FranzPublisher) Close() error {
	p.closed.Store(true)
	return nil
}

// SaramaPartitioner returns the partitioner that puts a key's records
// where Sarama's default (hash) partitioner does, and so where Publisher
// puts them: give it to the client of a FranzPublisher
// (kgo.RecordPartitioner) that takes over a topic Publisher wrote, so
// that each ordering key stays on its partition, and its records in
// order. Without it, franz-go places keys as Kafka's Java client does.
func SaramaPartitioner() kgo.Partitioner {
	return kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(func(key []byte) uint32 {
		h := fnv.New32a()
		_, _ = h.Write(key)
		return h.Sum32()
	}))
}
