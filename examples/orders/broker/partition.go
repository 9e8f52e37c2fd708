package broker

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgbox/pgbox"
)

// Why partitions: a watermill-sql consumer group, like a JetStream durable
// consumer read through Watermill, hands its subscriber one message at a
// time and waits for the acknowledgement before the next, so that a group
// sees its topic in order. Every delivery then costs a full inbox insert
// (a commit) before the next can start, and one topic carries a few hundred
// messages a second at best, fewer on a busy machine, however many
// processes subscribe.
//
// Kafka's answer is partitions, and so is this package's: each topic is
// split into Config.Partitions topics, a message goes to one of them by its
// ordering key (or, without one, its id), and a subscriber reads all of them
// at once, one message in flight per partition. Messages that share an
// ordering key share a partition, so they still arrive in order.

// partition returns the partition topic for topic and the message.
func (c Config) partition(topic string, m *message.Message) string {
	key := m.Metadata.Get(pgbox.MetadataOrderingKey)
	if key == "" {
		key = m.UUID
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return partitionTopic(topic, int(h.Sum32()%uint32(c.Partitions)))
}

// partitions returns every partition topic of topic.
func (c Config) partitions(topic string) []string {
	out := make([]string, c.Partitions)
	for p := range out {
		out[p] = partitionTopic(topic, p)
	}
	return out
}

func partitionTopic(topic string, p int) string { return fmt.Sprintf("%s_%d", topic, p) }

// partitionedPublisher publishes each message to its partition.
type partitionedPublisher struct {
	b   *Broker
	pub message.Publisher
}

// Publish publishes msgs, each to its partition of topic, keeping their
// order within each partition.
func (p partitionedPublisher) Publish(topic string, msgs ...*message.Message) error {
	var order []string
	byPartition := map[string][]*message.Message{}
	for _, m := range msgs {
		t := p.b.cfg.partition(topic, m)
		if _, ok := byPartition[t]; !ok {
			order = append(order, t)
		}
		byPartition[t] = append(byPartition[t], m)
	}
	for _, t := range order {
		if err := p.pub.Publish(t, byPartition[t]...); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the underlying publisher.
func (p partitionedPublisher) Close() error { return p.pub.Close() }

// partitionedSubscriber subscribes to every partition of a topic and merges
// them into one channel. A Watermill router handles the messages of one
// channel concurrently, so one message per partition is in flight.
type partitionedSubscriber struct {
	b   *Broker
	sub message.Subscriber
}

// Subscribe subscribes to every partition of topic. The channel closes once
// every partition's has.
func (s partitionedSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	var wg sync.WaitGroup
	for _, t := range s.b.cfg.partitions(topic) {
		in, err := s.sub.Subscribe(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("subscribe to %s: %w", t, err)
		}
		wg.Go(func() {
			for m := range in {
				out <- m
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out, nil
}

// Close closes the underlying subscriber, which closes its channels.
func (s partitionedSubscriber) Close() error { return s.sub.Close() }
