package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/pgbox/pgbox/sqs"
)

// sqsScheme starts the URL of an SQS endpoint: "sqs+http://127.0.0.1:4100"
// for goaws (scripts/goaws.sh), "sqs+https://sqs.eu-west-1.amazonaws.com"
// for AWS, whose credentials and region then come from the environment as
// the AWS SDK reads them.
const sqsScheme = "sqs+"

// sqsBackend is Amazon SQS through package sqs: one standard queue per
// partition topic, named as a stream is (Config.stream), created by Open.
// A queue is read by one consumer group, as every topic of the example
// is: with several groups on a topic, SNS would fan it out to a queue per
// group. A message a SIGKILLed consumer held comes back after the queue's
// visibility timeout, Config.AckWait (whole seconds, at least 1).
type sqsBackend struct {
	cfg    Config
	client *awssqs.Client
	pub    message.Publisher
}

// sqsClient returns a client of the endpoint in cfg.URL. goaws checks no
// credentials, and the SDK wants some: stand-ins are given when the
// environment has none.
func sqsClient(cfg Config) *awssqs.Client {
	opts := awssqs.Options{
		BaseEndpoint: aws.String(strings.TrimPrefix(cfg.URL, sqsScheme)),
		Region:       "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "pgbox", SecretAccessKey: "pgbox", Source: "orders example"}, nil
		}),
	}
	return awssqs.New(opts)
}

// openSQS creates the topics' queues, if missing.
func openSQS(ctx context.Context, b *Broker, topics []string) (backend, error) {
	s := &sqsBackend{cfg: b.cfg, client: sqsClient(b.cfg)}
	visibility := strconv.Itoa(max(1, int(b.cfg.AckWait/time.Second)))
	for _, topic := range topics {
		for _, t := range b.cfg.partitions(topic) {
			if _, err := s.client.CreateQueue(ctx, &awssqs.CreateQueueInput{
				QueueName:  aws.String(b.cfg.stream(t)),
				Attributes: map[string]string{string(types.QueueAttributeNameVisibilityTimeout): visibility},
			}); err != nil {
				return nil, fmt.Errorf("broker: create SQS queue %s at %s: %w", b.cfg.stream(t), b.cfg.URL, err)
			}
		}
	}
	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: s.client})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.pub = namespaced{cfg: b.cfg, pub: pub}
	return s, nil
}

// resetSQS deletes the topics' queues.
func resetSQS(ctx context.Context, cfg Config, topics []string) error {
	client := sqsClient(cfg)
	for _, topic := range topics {
		for _, t := range cfg.partitions(topic) {
			url, err := client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(cfg.stream(t))})
			var api smithy.APIError
			switch {
			case errors.As(err, &api) && (api.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || api.ErrorCode() == "QueueDoesNotExist"):
				continue // nothing to delete
			case err != nil:
				return fmt.Errorf("broker: look up SQS queue %s at %s: %w", cfg.stream(t), cfg.URL, err)
			}
			if _, err := client.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: url.QueueUrl}); err != nil {
				return fmt.Errorf("broker: delete SQS queue %s at %s: %w", cfg.stream(t), cfg.URL, err)
			}
		}
	}
	return nil
}

func (s *sqsBackend) publisher() message.Publisher { return s.pub }

// subscriber reads the queues; group is the queues' one reader.
func (s *sqsBackend) subscriber(string) (message.Subscriber, error) {
	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{Client: s.client, Logger: s.cfg.Logger})
	if err != nil {
		return nil, err
	}
	return namespaced{cfg: s.cfg, sub: sub}, nil
}

// backlog counts the queue's messages, waiting or in flight.
func (s *sqsBackend) backlog(ctx context.Context, topic, _ string) (int, error) {
	url, err := s.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(s.cfg.stream(topic))})
	if err != nil {
		return 0, err
	}
	out, err := s.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	}})
	if err != nil {
		return 0, err
	}
	var n int
	for _, name := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		v, err := strconv.Atoi(out.Attributes[string(name)])
		if err != nil {
			return 0, fmt.Errorf("broker: SQS queue %s: %s is %q", s.cfg.stream(topic), name, out.Attributes[string(name)])
		}
		n += v
	}
	return n, nil
}

func (s *sqsBackend) close() {}
