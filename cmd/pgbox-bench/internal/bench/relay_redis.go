package bench

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/pgbox/pgbox/redisstream"
)

// redisStreams publishes through pgbox's redisstream publisher to the
// Redis at url (scripts/redis.sh's fsyncs every write before it answers),
// a batch per call, its XADDs in one pipeline, into a stream deleted after
// the run.
func redisStreams(url string) newPublisher {
	return func(ctx context.Context, _ *pgxpool.Pool) (message.Publisher, func(), error) {
		rdb, err := redisClient(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, OwnsClient: true})
		if err != nil {
			_ = rdb.Close()
			return nil, nil, err
		}
		return pub, func() {
			_ = rdb.Del(context.Background(), "bench").Err()
			_ = pub.Close()
		}, nil
	}
}

// rawRedis sends a batch to the stream the Redis case uses with go-redis,
// an XADD per message (the id and payload fields), all in one pipeline,
// and waits for every reply.
func rawRedis(url string) newRawPublisher {
	return func(ctx context.Context, _ *pgxpool.Pool) (rawPublish, func(), error) {
		rdb, err := redisClient(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, _ pgx.Tx, msgs []rawMsg) error {
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, m := range msgs {
						p.XAdd(ctx, &redis.XAddArgs{Stream: m.topic, Values: []any{rawIDHeader, m.id, "payload", m.payload}})
					}
					return nil
				})
				return err
			}, func() {
				_ = rdb.Del(context.Background(), "bench").Err()
				_ = rdb.Close()
			}, nil
	}
}

// redisClient connects to the Redis at url.
func redisClient(ctx context.Context, url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return rdb, nil
}
