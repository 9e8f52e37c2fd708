package bench

import (
	"context"
	"errors"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pgbox/pgbox/googlepubsub"
)

// pubsubPSTest publishes through package googlepubsub (one acknowledged
// publish per message) to pstest, the Pub/Sub client's in-process fake:
// no real Pub/Sub's network or storage, so it measures the relay and the
// client, not the service. The topic has no subscription, so the fake
// keeps nothing: it scans every message a subscription holds on each
// publish, which would make the case measure the fake's backlog (113
// msgs/s by the end of a 50,000-row run).
func pubsubPSTest(ctx context.Context, _ *pgxpool.Pool) (message.Publisher, func(), error) {
	client, closeAll, err := pstestTopic(ctx)
	if err != nil {
		return nil, nil, err
	}
	pub := googlepubsub.NewPublisher(client, googlepubsub.PublisherConfig{})
	return pub, func() { _ = pub.Close(); closeAll() }, nil
}

// rawPubSub publishes a batch to the topic the Pub/Sub case uses with the
// Pub/Sub client's own publisher (which bundles messages into its calls),
// all at once, and waits for every message's result.
func rawPubSub(ctx context.Context, _ *pgxpool.Pool) (rawPublish, func(), error) {
	client, closeAll, err := pstestTopic(ctx)
	if err != nil {
		return nil, nil, err
	}
	topic := client.Publisher("bench")
	return func(ctx context.Context, _ pgx.Tx, msgs []rawMsg) error {
		results := make([]*pubsub.PublishResult, len(msgs))
		for i, m := range msgs {
			results[i] = topic.Publish(ctx, &pubsub.Message{Data: m.payload, Attributes: map[string]string{rawIDHeader: m.id}})
		}
		for _, r := range results {
			if _, err := r.Get(ctx); err != nil {
				return err
			}
		}
		return nil
	}, func() { topic.Stop(); closeAll() }, nil
}

// pstestTopic starts pstest with the topic "bench" the Pub/Sub cases
// publish to, and returns a client of it with what closes both.
func pstestTopic(ctx context.Context) (*pubsub.Client, func(), error) {
	srv := pstest.NewServer()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, errors.Join(err, srv.Close())
	}
	client, err := pubsub.NewClient(ctx, "bench", option.WithGRPCConn(conn))
	if err != nil {
		return nil, nil, errors.Join(err, conn.Close(), srv.Close())
	}
	closeAll := func() { _ = client.Close(); _ = conn.Close(); _ = srv.Close() }
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/bench/topics/bench"}); err != nil {
		closeAll()
		return nil, nil, err
	}
	return client, closeAll, nil
}
