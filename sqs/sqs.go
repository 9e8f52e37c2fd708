// Package sqs wires pgbox to Amazon SQS through the AWS SDK for Go v2: a
// Watermill publisher for the relay and a Watermill subscriber for
// watermillinbox, each on an *sqs.Client the caller configures (region,
// credentials, endpoint, retries).
//
//	client := awssqs.NewFromConfig(awsCfg)
//	pub, _ := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
//	r, _ := relay.New(pool, relay.Config{Publisher: pub})
//
//	sub, _ := sqs.NewSubscriber(sqs.SubscriberConfig{Client: client})
//	router.AddConsumerHandler("payments-inbox", "orders", sub, watermillinbox.Handler(...))
//
// A topic is the name of a queue, which must exist (SQS queues are made by
// infrastructure code, with their visibility timeout and redrive policy):
// one queue per consumer. To fan one topic out to several consumers, publish
// to an SNS topic with raw message delivery to their queues.
//
// # Dedupe
//
// The consumer's inbox dedupes on pgbox's id, the outbox row's id, carried
// in the message attribute AttributeID and read back as the Watermill
// message UUID, which is watermillinbox's default key. Never dedupe pgbox's
// messages on SQS's MessageId: a row the relay publishes again (its first
// publish failed or got no answer after SQS took it, or the relay crashed
// before recording it) is a new SQS message with a new MessageId, and would
// be handled twice. SQS's own redeliveries (a handler slower than the
// visibility timeout, a consumer that died before DeleteMessage) keep the
// MessageId, and pgbox's id too.
//
// A foreign producer's message has no pgbox id; the subscriber puts its
// MessageId in the metadata, MetadataMessageID, and its string and number
// message attributes each under their name. Deduping it on MessageId
// (watermillinbox.UUIDOr(watermillinbox.MetadataID(sqs.MetadataMessageID)))
// absorbs SQS's redeliveries, not the producer's own retries, which send a
// new message: when the producer sets an id of its own, dedupe on that.
//
// # Dating a MessageId
//
// A MessageId is random, and the inbox keeps random ids at a cost that
// grows with what it keeps, unless each comes with a time fixed with it.
// SQS stamps every message with the time it took it, SentTimestamp, the
// same on every receive of the message (its MessageId): the subscriber
// puts it in the metadata, MetadataSentTimestamp, and SentTime reads it.
// A MessageId is dated by it, so pass the pair to watermillinbox:
//
//	watermillinbox.Config{
//		IDFunc:     watermillinbox.UUIDOr(watermillinbox.MetadataID(sqs.MetadataMessageID)),
//		IDTimeFunc: sqs.SentTime,
//	}
//
// SentTime dates the MessageId and nothing else. A message sent again (a
// relay's republish, a producer's retry) is a new SQS message, with a new
// MessageId and a new SentTimestamp: the time is not fixed with a pgbox id
// or a producer's own id, so never pair it with those. pgbox's ids are
// UUIDv7s, dated by themselves, and the inbox ignores the time given with
// them.
//
// # Visibility
//
// SQS hides a received message for the visibility timeout, then hands it
// out again, to any consumer, whether or not the first is still at work.
// The subscriber extends the visibility of every message it holds (see
// SubscriberConfig.ExtendEvery) until the handler acknowledges it, when it
// deletes it, or nacks it, when it makes it visible again after
// SubscriberConfig.NackDelay. A
// copy that comes back all the same (a consumer that died before
// DeleteMessage, an extension that failed) is acknowledged by
// watermillinbox as a duplicate.
//
// # FIFO queues
//
// To a queue whose name ends in ".fifo" the publisher sends each message
// with MessageGroupId set to its ordering key (pgbox.MetadataOrderingKey;
// its id when it has none, so that unkeyed messages do not wait on each
// other) and MessageDeduplicationId set to its id: SQS drops a copy the
// relay publishes again within five minutes. Standard queues need neither:
// the relay publishes one message per ordering key at a time, and the
// inbox and the dispatcher keep each key's order.
//
// # Payloads
//
// SQS takes a message body of Unicode text only (no NUL, no invalid UTF-8).
// A payload that is such text is sent as it is; any other is sent in
// base64, marked by the AttributeEncoding message attribute, which the
// subscriber decodes: bytes round-trip exactly either way.
package sqs

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/pgbox/pgbox/relay"
)

// The message attributes pgbox's messages carry.
const (
	// AttributeID carries the message's pgbox id (its Watermill UUID, the
	// outbox row's id): the consumer's dedupe key.
	AttributeID = "pgbox-id"
	// AttributeMetadata carries the message's Watermill metadata, as a
	// JSON object of strings: SQS allows only 10 attributes a message.
	AttributeMetadata = "pgbox-metadata"
	// AttributeEncoding is "base64" when the body is the payload in
	// base64, because the payload is not text SQS takes; absent otherwise.
	AttributeEncoding = "pgbox-encoding"
)

// The metadata keys under which the subscriber puts what SQS says of each
// message it receives, whoever sent it.
const (
	// MetadataMessageID is the key of the message's SQS MessageId.
	MetadataMessageID = "sqs_message_id"
	// MetadataSentTimestamp is the key of the message's SQS SentTimestamp,
	// the time SQS took it from its sender, as SQS gives it: decimal Unix
	// milliseconds. SentTime reads it.
	MetadataSentTimestamp = "sqs_sent_timestamp"
)

// sentTimestamp names the SQS system attribute the subscriber asks for
// and carries under MetadataSentTimestamp
// (types.MessageSystemAttributeNameSentTimestamp; untyped, since the
// SDK's ReceiveMessageInput.AttributeNames takes QueueAttributeNames).
const sentTimestamp = "SentTimestamp"

// SentTime returns the time SQS took msg from its sender, its
// SentTimestamp, which the subscriber puts in the metadata under
// MetadataSentTimestamp; the zero time when msg has none, or one that is
// not a positive number of milliseconds.
//
// SQS gives one message (one MessageId) the same SentTimestamp on every
// receive, so it dates the MessageId for watermillinbox's IDTimeFunc (see
// the package doc): the inbox looks for a redelivery where it stored the
// first delivery, by that time. A message sent again is a new message
// with a new time; do not date any other id with it.
func SentTime(msg *message.Message) time.Time {
	ms, err := strconv.ParseInt(msg.Metadata.Get(MetadataSentTimestamp), 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// queueURLs caches the URL of each queue, by name.
type queueURLs struct {
	client *awssqs.Client
	mu     sync.Mutex
	urls   map[string]string
}

// get returns the URL of queue, asking SQS the first time.
func (q *queueURLs) get(ctx context.Context, queue string) (string, error) {
	q.mu.Lock()
	url, ok := q.urls[queue]
	q.mu.Unlock()
	if ok {
		return url, nil
	}
	out, err := q.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		return "", outage(fmt.Errorf("sqs: the URL of queue %q: %w", queue, err))
	}
	q.mu.Lock()
	q.urls[queue] = *out.QueueUrl
	q.mu.Unlock()
	return *out.QueueUrl, nil
}

// outage returns err, marked as an outage when no message is at fault: SQS
// could not be reached (IsUnreachable recognises network errors itself),
// answered with a server error or throttling, refused the credentials, or
// has no such queue. The relay then pauses instead of charging rows that
// no retry could help. A missing queue says how to fix it.
func outage(err error) error {
	// SQS names a missing queue AWS.SimpleQueueService.NonExistentQueue in
	// its query protocol and QueueDoesNotExist in its JSON one; the SDK
	// gives it a type only for the operations whose model lists it.
	var api smithy.APIError
	if errors.As(err, &api) && (api.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || api.ErrorCode() == "QueueDoesNotExist") {
		return fmt.Errorf("%w: %w (create the queue: pgbox does not create queues, whose visibility timeout and redrive policy are the infrastructure's to set)",
			relay.ErrBrokerUnreachable, err)
	}
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) {
		switch code := resp.HTTPStatusCode(); {
		case code >= http.StatusInternalServerError, code == http.StatusTooManyRequests,
			code == http.StatusUnauthorized, code == http.StatusForbidden:
			return fmt.Errorf("%w: %w", relay.ErrBrokerUnreachable, err)
		}
	}
	return err
}

// text reports whether b is a message body SQS takes as it is: valid
// UTF-8 of the characters #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD
// and #x10000 to #x10FFFF.
func text(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == 0x9, r == 0xA, r == 0xD,
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

// marshal returns msg's body and message attributes.
func marshal(msg *message.Message) (string, map[string]types.MessageAttributeValue, error) {
	attrs := map[string]types.MessageAttributeValue{
		AttributeID: {DataType: aws.String("String"), StringValue: aws.String(msg.UUID)},
	}
	if msg.UUID == "" {
		return "", nil, errors.New("sqs: the message has no UUID: pgbox's relay sets it to the outbox row's id, the consumer's dedupe key")
	}
	if len(msg.Metadata) > 0 {
		md, err := json.Marshal(msg.Metadata)
		if err != nil {
			return "", nil, fmt.Errorf("sqs: message %s: metadata: %w", msg.UUID, err)
		}
		attrs[AttributeMetadata] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(string(md))}
	}
	if text(msg.Payload) {
		return string(msg.Payload), attrs, nil
	}
	attrs[AttributeEncoding] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("base64")}
	return base64.StdEncoding.EncodeToString(msg.Payload), attrs, nil
}

// unmarshal returns the Watermill message m carries: UUID and metadata
// from pgbox's attributes, or, for a foreign producer's message, no UUID
// and its string and number attributes as metadata; and its MessageId
// and SentTimestamp under MetadataMessageID and MetadataSentTimestamp.
func unmarshal(m types.Message) (*message.Message, error) {
	id := stringAttr(m.MessageAttributes, AttributeID)
	body := []byte(aws.ToString(m.Body))
	if enc := stringAttr(m.MessageAttributes, AttributeEncoding); enc != "" {
		if enc != "base64" {
			return nil, fmt.Errorf("sqs: message %s: attribute %s is %q, not base64: sent by a newer pgbox?", aws.ToString(m.MessageId), AttributeEncoding, enc)
		}
		var err error
		if body, err = base64.StdEncoding.DecodeString(string(body)); err != nil {
			return nil, fmt.Errorf("sqs: message %s: its body is marked base64 and is not: %w", aws.ToString(m.MessageId), err)
		}
	}
	msg := message.NewMessage(id, body)
	if md, ok := m.MessageAttributes[AttributeMetadata]; ok {
		if err := json.Unmarshal([]byte(aws.ToString(md.StringValue)), &msg.Metadata); err != nil {
			return nil, fmt.Errorf("sqs: message %s: attribute %s is not a JSON object of strings: %w", aws.ToString(m.MessageId), AttributeMetadata, err)
		}
	} else if id == "" {
		for name, a := range m.MessageAttributes {
			if t := aws.ToString(a.DataType); a.StringValue != nil && (strings.HasPrefix(t, "String") || strings.HasPrefix(t, "Number")) {
				msg.Metadata.Set(name, *a.StringValue)
			}
		}
	}
	msg.Metadata.Set(MetadataMessageID, aws.ToString(m.MessageId))
	// Set or removed, never left: metadata that came through an earlier
	// queue (a message received, then sent on) would date this one wrong.
	if ts, ok := m.Attributes[sentTimestamp]; ok {
		msg.Metadata.Set(MetadataSentTimestamp, ts)
	} else {
		delete(msg.Metadata, MetadataSentTimestamp)
	}
	return msg, nil
}

func stringAttr(attrs map[string]types.MessageAttributeValue, name string) string {
	return aws.ToString(attrs[name].StringValue)
}
