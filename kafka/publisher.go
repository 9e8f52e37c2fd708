package kafka

import (
	"cmp"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgbox/pgbox/relay"
)

// Publisher publishes Watermill messages to Kafka on Sarama's
// SyncProducer, as watermill-kafka's publisher does, and is a
// relay.ResultPublisher: it hands a call's messages to the producer
// together (SendMessages), which batches them by partition and waits for
// the brokers' acknowledgements once, where watermill-kafka's Publish
// sends one message and waits for its acknowledgement before the next.
// A message counts as published once acknowledged as the Sarama
// configuration's Producer.RequiredAcks asks, as with watermill-kafka's
// publisher. It is safe for concurrent use.
type Publisher struct {
	producer  sarama.SyncProducer
	marshaler wmkafka.Marshaler
	closed    atomic.Bool
}

var _ relay.ResultPublisher = (*Publisher)(nil)

// NewPublisher returns a Publisher configured by cfg as watermill-kafka's
// NewPublisher would be: cfg.Brokers, cfg.Marshaler (Marshaler, for
// pgbox's ordering keys) and cfg.OverwriteSaramaConfig
// (wmkafka.DefaultSaramaSyncPublisherConfig when nil). It fails when
// cfg.Brokers or cfg.Marshaler is missing, when cfg asks for tracing
// (OTELEnabled, Tracer), which it does not support, or when Sarama
// cannot connect.
func NewPublisher(cfg wmkafka.PublisherConfig) (*Publisher, error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, errors.New("kafka: PublisherConfig.Brokers is empty: give the addresses of the Kafka brokers (host:port)")
	case cfg.Marshaler == nil:
		return nil, errors.New("kafka: PublisherConfig.Marshaler is nil: give kafka.Marshaler(), which keys records by pgbox's ordering key")
	case cfg.OTELEnabled || cfg.Tracer != nil:
		return nil, errors.New("kafka: PublisherConfig.OTELEnabled and Tracer are not supported by kafka.NewPublisher: leave them unset (the relay traces each publish), or use watermill-kafka's NewPublisher")
	}
	producer, err := sarama.NewSyncProducer(cfg.Brokers, cmp.Or(cfg.OverwriteSaramaConfig, wmkafka.DefaultSaramaSyncPublisherConfig()))
	if err != nil {
		return nil, fmt.Errorf("kafka: create the producer: %w", err)
	}
	return &Publisher{producer: producer, marshaler: cfg.Marshaler}, nil
}

// Publish publishes msgs to topic and returns once Kafka has acknowledged
// each. If any fails, it returns an error saying how many, and the first
// one's reason; the others were published. A relay uses PublishResults
// instead, which tells them apart.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return relay.ResultsError("kafka", topic, p.PublishResults(topic, msgs...))
}

// PublishResults publishes msgs to topic, handing them to the producer
// together, and returns each message's error, in the order of msgs: nil
// for a message Kafka acknowledged. Errors are Sarama's, wrapped, so that
// relay.IsUnreachable classifies them as it does watermill-kafka's.
func (p *Publisher) PublishResults(topic string, msgs ...*message.Message) []error {
	errs := make([]error, len(msgs))
	if p.closed.Load() {
		for i := range errs {
			errs[i] = fmt.Errorf("kafka: %w", relay.ErrPublisherClosed)
		}
		return errs
	}
	records := make([]*sarama.ProducerMessage, 0, len(msgs))
	index := make(map[*sarama.ProducerMessage]int, len(msgs))
	for i, msg := range msgs {
		record, err := p.marshaler.Marshal(topic, msg)
		if err != nil {
			errs[i] = fmt.Errorf("kafka: marshal message %s: %w", msg.UUID, err)
			continue
		}
		records = append(records, record)
		index[record] = i
	}
	if len(records) == 0 {
		return errs
	}
	err := p.producer.SendMessages(records)
	var failed sarama.ProducerErrors
	switch {
	case err == nil:
	case errors.As(err, &failed):
		for _, f := range failed {
			i := index[f.Msg]
			errs[i] = fmt.Errorf("kafka: produce message %s to %q: %w", msgs[i].UUID, topic, f.Err)
		}
	default: // SendMessages returns nothing else; were it to, nothing counts as published
		for _, i := range index {
			errs[i] = fmt.Errorf("kafka: produce message %s to %q: %w", msgs[i].UUID, topic, err)
		}
	}
	return errs
}

// Close closes the producer, after the messages it holds are sent. Calls
// after Close fail.
func (p *Publisher) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	if err := p.producer.Close(); err != nil {
		return fmt.Errorf("kafka: close the producer: %w", err)
	}
	return nil
}
