package bench

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox/internal/sqstest"
	"github.com/pgbox/pgbox/sqs"
)

// sqsRelay returns the relay case through Amazon SQS's protocol at the
// endpoint url (goaws, which keeps messages in memory), made by relayTo;
// none when url is empty.
func sqsRelay(url string, relayTo func(string, newPublisher, newRawPublisher, bool) benchCase) []benchCase {
	if url == "" {
		return nil
	}
	return []benchCase{relayTo("Amazon SQS (goaws)", sqsQueue(url), rawSQS(url), false)}
}

// sqsQueue publishes through package sqs's publisher (one SendMessage per
// message, each tried once) to a queue "bench" it creates, and deletes
// after.
func sqsQueue(url string) newPublisher {
	return func(ctx context.Context, _ *pgxpool.Pool) (message.Publisher, func(), error) {
		client, _, deleteQueue, err := sqsBenchQueue(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
		if err != nil {
			deleteQueue()
			return nil, nil, err
		}
		return pub, func() { _ = pub.Close(); deleteQueue() }, nil
	}
}

// rawSQS sends a batch to the queue the SQS case uses with the AWS SDK,
// sqs.PublisherConcurrencyDefault SendMessage calls at once (not
// SendMessageBatch, whose message attributes goaws drops: see package
// sqs), and waits for every one.
func rawSQS(url string) newRawPublisher {
	return func(ctx context.Context, _ *pgxpool.Pool) (rawPublish, func(), error) {
		client, queue, deleteQueue, err := sqsBenchQueue(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, _ pgx.Tx, msgs []rawMsg) error {
			g, ctx := errgroup.WithContext(ctx)
			g.SetLimit(sqs.PublisherConcurrencyDefault)
			for _, m := range msgs {
				g.Go(func() error {
					_, err := client.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: queue, MessageBody: aws.String(string(m.payload)),
						MessageAttributes: map[string]types.MessageAttributeValue{rawIDHeader: {DataType: aws.String("String"), StringValue: aws.String(m.id)}}})
					return err
				})
			}
			return g.Wait()
		}, deleteQueue, nil
	}
}

// sqsBenchQueue creates the queue "bench" the SQS cases publish to at the
// endpoint url, and returns a client, the queue's URL and what deletes it.
func sqsBenchQueue(ctx context.Context, url string) (*awssqs.Client, *string, func(), error) {
	client := sqstest.Client(url)
	q, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("bench")})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create the SQS queue at %s: %w", url, err)
	}
	return client, q.QueueUrl, func() {
		_, _ = client.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
	}, nil
}
