package natsjs_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wmjetstream "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/natstest"
	"github.com/pgbox/pgbox/internal/relaybench"
)

// BenchmarkRelay publishes a backlog of outbox rows through a relay with
// its defaults to NATS JetStream, through watermill-nats's publisher (one
// message per call, each acknowledged before the next) and through this
// package's (a batch per call, acknowledgements waited for together), side
// by side, and reports msgs/s with the load average. Run with:
// go test ./natsjs -run '^$' -bench Relay -benchtime 1x -count 5
func BenchmarkRelay(b *testing.B) {
	relaybench.Run(b, 20_000, func(b *testing.B) string { _, topic := stream(b, 0); return topic },
		relaybench.System{Name: "watermill-nats", Publisher: func(b *testing.B, _ string) message.Publisher {
			pub, err := wmjetstream.NewPublisher(wmjetstream.PublisherConfig{URL: natstest.URL(b), Logger: watermill.NopLogger{}})
			require.NoError(b, err)
			b.Cleanup(func() { _ = pub.Close() })
			return pub
		}},
		relaybench.System{Name: "natsjs", Publisher: func(b *testing.B, _ string) message.Publisher {
			nc, _ := stream(b, 0) // a connection of its own, as watermill-nats's
			return newPublisher(b, nc)
		}},
	)
}
