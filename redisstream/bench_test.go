package redisstream_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/brokertest"
	"github.com/pgbox/pgbox/internal/relaybench"
	"github.com/pgbox/pgbox/redisstream"
)

// BenchmarkRelay publishes a backlog of outbox rows through a relay with
// its defaults to Redis Streams (scripts/redis.sh: every write fsynced
// before Redis answers), through watermill-redisstream's publisher (one
// message per call, one XADD round trip each) and through this package's
// (a batch per call, its XADDs in one pipeline), side by side, and reports
// msgs/s with the load average. Run with:
// go test ./redisstream -run '^$' -bench Relay -benchtime 1x -count 3
func BenchmarkRelay(b *testing.B) {
	url := brokertest.Start(b, brokertest.Redis).URL()
	topic := func(b *testing.B) string {
		topic := stream()
		b.Cleanup(func() { _ = client(b, url).Del(context.Background(), topic).Err() })
		return topic
	}
	relaybench.Run(b, 20_000, topic,
		relaybench.System{Name: "watermill-redisstream", Publisher: func(b *testing.B, _ string) message.Publisher {
			// Its Close closes the client; the relay does not close it.
			pub, err := wmredis.NewPublisher(wmredis.PublisherConfig{Client: client(b, url)}, watermill.NopLogger{})
			require.NoError(b, err)
			return pub
		}},
		relaybench.System{Name: "redisstream", Publisher: func(b *testing.B, _ string) message.Publisher {
			return newPublisher(b, client(b, url), redisstream.PublisherConfig{})
		}},
	)
}
