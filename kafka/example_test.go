package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgbox/pgbox/kafka"
)

// A foreign producer's record, with no id of its own, is keyed by its
// place and dated by its timestamp. A consumer hands the pair to
// watermillinbox, with pgbox's own messages on the topic still keyed by
// their UUID:
//
//	watermillinbox.Config{
//		IDFunc:     watermillinbox.UUIDOr(kafka.OffsetID),
//		IDTimeFunc: kafka.RecordTime,
//	}
//
// Here the handler prints them. The broker is franz-go's in-process kfake.
func ExampleOffsetID() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "ledger"))
	defer cluster.Close()
	producer, _ := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("ledger"))
	defer producer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sent := time.Now().Truncate(time.Millisecond)
	if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte(`{"entry":1}`)}).FirstErr(); err != nil {
		fmt.Println(err)
		return
	}

	logger := watermill.NewSlogLogger(slog.New(slog.DiscardHandler))
	saramaCfg := wmkafka.DefaultSaramaSubscriberConfig()
	saramaCfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers: cluster.ListenAddrs(), ConsumerGroup: "ledger", OverwriteSaramaConfig: saramaCfg, Unmarshaler: kafka.Marshaler(),
	}, logger)
	if err != nil {
		fmt.Println(err)
		return
	}
	router, _ := message.NewRouter(message.RouterConfig{}, logger)
	handled := make(chan string, 1)
	router.AddConsumerHandler("ledger-inbox", "ledger", sub, func(m *message.Message) error {
		id, err := kafka.OffsetID(m)
		select {
		case handled <- fmt.Sprint(id, " ", err, " ", !kafka.RecordTime(m).Before(sent)):
		default:
		}
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	fmt.Println(<-handled)
	_ = router.Close()
	// Output: ledger/0/0 <nil> true
}

// A relay given kafka's Publisher publishes a batch's messages together
// and learns which ones Kafka took; here PublishResults is called by
// hand. The broker is franz-go's in-process kfake.
func ExamplePublisher_PublishResults() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "orders"))
	defer cluster.Close()
	pub, err := kafka.NewPublisher(wmkafka.PublisherConfig{Brokers: cluster.ListenAddrs(), Marshaler: kafka.Marshaler()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	// r, _ := relay.New(pool, relay.Config{Publisher: pub})
	errs := pub.PublishResults("orders",
		message.NewMessage("0192a8e6-7a50-7c1e-8f3e-000000000001", []byte(`{"order":1}`)),
		message.NewMessage("0192a8e6-7a50-7c1e-8f3e-000000000002", []byte(`{"order":2}`)))
	fmt.Println(errs)
	// Output: [<nil> <nil>]
}

// A relay given a FranzPublisher produces a batch's messages together on
// a franz-go client and learns which ones Kafka took; here PublishResults
// is called by hand. SaramaPartitioner keeps each key where Sarama's
// producer put it, for a topic it wrote before. The broker is franz-go's
// in-process kfake.
func ExampleFranzPublisher() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "orders"))
	defer cluster.Close()
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kafka.SaramaPartitioner()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	pub, err := kafka.NewFranzPublisher(kafka.FranzConfig{Client: client, Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	// r, _ := relay.New(pool, relay.Config{Publisher: pub})
	errs := pub.PublishResults("orders",
		message.NewMessage("0192a8e6-7a50-7c1e-8f3e-000000000001", []byte(`{"order":1}`)),
		message.NewMessage("0192a8e6-7a50-7c1e-8f3e-000000000002", []byte(`{"order":2}`)))
	fmt.Println(errs)
	// Output: [<nil> <nil>]
}
