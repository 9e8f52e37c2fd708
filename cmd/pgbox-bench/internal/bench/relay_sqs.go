package bench

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/internal/sqstest"
	"github.com/pgbox/pgbox/sqs"
)

// sqsRelay returns the relay case through Amazon SQS's protocol at the
// endpoint url (goaws, which keeps messages in memory), made by relayTo;
// none when url is empty.
func sqsRelay(url string, relayTo func(string, newPublisher, bool) benchCase) []benchCase {
	if url == "" {
		return nil
	}
	return []benchCase{relayTo("Amazon SQS (goaws)", sqsQueue(url), false)}
}

// sqsQueue publishes through package sqs's publisher (one SendMessage per
// message, each tried once) to a queue "bench" it creates, and deletes
// after.
func sqsQueue(url string) newPublisher {
	return func(ctx context.Context, _ *pgxpool.Pool) (message.Publisher, func(), error) {
		client := sqstest.Client(url)
		q, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("bench")})
		if err != nil {
			return nil, nil, fmt.Errorf("create the SQS queue at %s: %w", url, err)
		}
		pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
		if err != nil {
			return nil, nil, err
		}
		return pub, func() {
			_ = pub.Close()
			_, _ = client.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
		}, nil
	}
}
