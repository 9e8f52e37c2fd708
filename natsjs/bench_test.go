package natsjs_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjetstream "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/natstest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// BenchmarkRelay publishes a backlog of outbox rows through a relay with
// its defaults to NATS JetStream, through watermill-nats's publisher (one
// message per call, each acknowledged before the next) and through this
// package's (a batch per call, acknowledgements waited for together), side
// by side, and reports msgs/s with the load average. Run with:
// go test ./natsjs -run '^$' -bench Relay -benchtime 1x -count 5
func BenchmarkRelay(b *testing.B) {
	const rows = 20_000
	systems := map[string]func(b *testing.B, topic string) message.Publisher{
		"watermill-nats": func(b *testing.B, _ string) message.Publisher {
			pub, err := wmjetstream.NewPublisher(wmjetstream.PublisherConfig{URL: natstest.URL(b), Logger: watermill.NopLogger{}})
			require.NoError(b, err)
			b.Cleanup(func() { _ = pub.Close() })
			return pub
		},
		"natsjs": func(b *testing.B, _ string) message.Publisher {
			nc, _ := stream(b, 0) // a connection of its own, as watermill-nats's
			return newPublisher(b, nc)
		},
	}
	for _, name := range []string{"watermill-nats", "natsjs"} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				_, topic := stream(b, 0)
				pool, schema := pgtest.Pool(b), pgtest.Schema(b)
				loadOutbox(b, pool, schema, topic, rows)
				r, err := relay.New(pool, relay.Config{Publisher: systems[name](b, topic), Schema: schema,
					ListenConnConfig: pgtest.ListenConnConfig(b), Logger: slog.New(slog.DiscardHandler)})
				require.NoError(b, err)
				b.StartTimer()
				start := time.Now()
				require.NoError(b, r.Start(context.Background()))
				require.Eventually(b, func() bool {
					var waiting bool
					require.NoError(b, pool.QueryRow(context.Background(), ident.Render("SELECT EXISTS (SELECT 1 FROM /* schema */outbox WHERE status IN ('pending', 'running'))", schema)).Scan(&waiting))
					return !waiting
				}, 5*time.Minute, 10*time.Millisecond)
				b.ReportMetric(rows/time.Since(start).Seconds(), "msgs/s")
				require.NoError(b, r.Stop(context.Background()))
			}
			load, _ := os.ReadFile("/proc/loadavg")
			b.Logf("load average: %s", strings.Join(strings.Fields(string(load))[:3], " "))
		})
	}
}

// loadOutbox writes n rows to topic, 1000 per transaction, and vacuums the
// outbox, as the relay benchmark of cmd/pgbox-bench does.
func loadOutbox(b *testing.B, pool *pgxpool.Pool, schema, topic string, n int) {
	ctx := context.Background()
	box, err := outbox.New(pool, outbox.Config{Schema: schema})
	require.NoError(b, err)
	msgs := make([]outbox.Message, 1000)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Payload: []byte(`{"bench":true}`)}
	}
	for range n / len(msgs) {
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := box.Write(ctx, tx, msgs...)
			return err
		}))
	}
	_, err = pool.Exec(ctx, ident.Render("VACUUM ANALYZE /* schema */outbox", schema))
	require.NoError(b, err)
}
