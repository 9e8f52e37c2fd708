// Package sqstest gives tests an SQS client of the AWS SDK for Go v2 on
// a goaws server (internal/brokertest, scripts/goaws.sh), and queues of
// their own on it.
package sqstest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Client returns a client of the SQS endpoint url, with stand-in
// credentials, that tries each call once: a test sees an outage at once.
func Client(url string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		BaseEndpoint: aws.String(url),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "pgbox", SecretAccessKey: "pgbox", Source: "sqstest"}, nil
		}),
		Region:           "us-east-1",
		RetryMaxAttempts: 1,
	})
}

// CreateQueue creates queue name with visibility timeout visibility, and
// returns its URL.
func CreateQueue(tb testing.TB, client *awssqs.Client, name string, visibility time.Duration) string {
	tb.Helper()
	out, err := client.CreateQueue(context.Background(), &awssqs.CreateQueueInput{
		QueueName:  aws.String(name),
		Attributes: map[string]string{"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second))},
	})
	if err != nil {
		tb.Fatalf("sqstest: create queue %q: %v", name, err)
	}
	return *out.QueueUrl
}

// Waiting returns how many messages queue url holds, visible or not.
func Waiting(tb testing.TB, client *awssqs.Client, url string) int {
	tb.Helper()
	out, err := client.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		tb.Fatalf("sqstest: attributes of %s: %v", url, err)
	}
	n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	if err != nil {
		tb.Fatalf("sqstest: ApproximateNumberOfMessages of %s: %v", url, err)
	}
	return n
}
