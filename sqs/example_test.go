package sqs_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/sqs"
)

// The relay's side and the consumer's side of one queue. In a service,
// the relay publishes (relay.Config{Publisher: pub}) and a Watermill
// router hands the subscription to watermillinbox.Handler, which
// acknowledges each message once it is in the inbox.
func Example() {
	ctx := context.Background()
	// On AWS: awssqs.NewFromConfig(cfg), cfg from config.LoadDefaultConfig.
	// Here, a local goaws and stand-in credentials.
	client := awssqs.New(awssqs.Options{
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "example", SecretAccessKey: "example"}, nil
		}),
		Region: "us-east-1",
	})
	if _, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("example-orders")}); err != nil {
		fmt.Println(err)
		return
	}

	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	// As the relay publishes an outbox row: its id is the message's UUID.
	msg := message.NewMessage("0190b6c2-8d5e-7cc1-a5a4-7d6c0e7b0d11", []byte(`{"order":"o-1"}`))
	msg.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
	if err := pub.Publish("example-orders", msg); err != nil {
		fmt.Println(err)
		return
	}

	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{Client: client})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "example-orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	got := <-msgs
	fmt.Println(got.UUID, got.Metadata.Get(pgbox.MetadataEventType), string(got.Payload))
	got.Ack() // deletes it from the queue
	// Output: 0190b6c2-8d5e-7cc1-a5a4-7d6c0e7b0d11 OrderPlaced {"order":"o-1"}
}

// A MessageId is dated by the SentTimestamp SQS gives the message, which
// the subscriber carries in the metadata (decimal Unix milliseconds) and
// SentTime reads. For watermillinbox, a queue of foreign messages is
// deduped on the pair:
//
//	watermillinbox.Config{
//		IDFunc:     watermillinbox.UUIDOr(watermillinbox.MetadataID(sqs.MetadataMessageID)),
//		IDTimeFunc: sqs.SentTime,
//	}
func ExampleSentTime() {
	// As the subscriber hands over a message SQS took at 14:40 UTC.
	msg := message.NewMessage("", []byte(`{"entry":1}`))
	msg.Metadata.Set(sqs.MetadataMessageID, "5fea7756-0ea4-451a-a703-a558b933e274")
	msg.Metadata.Set(sqs.MetadataSentTimestamp, "1764254400000")
	fmt.Println(sqs.SentTime(msg))

	// No SentTimestamp: undated.
	fmt.Println(sqs.SentTime(message.NewMessage("", nil)).IsZero())
	// Output:
	// 2025-11-27 14:40:00 +0000 UTC
	// true
}
