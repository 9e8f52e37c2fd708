// Package relaybench measures a relay's throughput through the publishers
// of a broker package, side by side, for the packages' BenchmarkRelay.
package relaybench

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/outboxdrain"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// System is a publisher to measure.
type System struct {
	// Name names the sub-benchmark.
	Name string
	// Publisher returns the publisher, for the topic of the run.
	Publisher func(b *testing.B, topic string) message.Publisher
}

// Run runs a sub-benchmark per system, in order: each publishes a backlog
// of rows outbox rows to a topic of its own (topic returns a new one,
// made on the broker) through a relay with its defaults, and reports
// msgs/s and logs the load average.
func Run(b *testing.B, rows int, topic func(b *testing.B) string, systems ...System) {
	for _, sys := range systems {
		b.Run(sys.Name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				topic := topic(b)
				pool, schema := pgtest.Pool(b), pgtest.Schema(b)
				Backlog(b, pool, schema, topic, rows)
				r, err := relay.New(pool, relay.Config{Publisher: sys.Publisher(b, topic), Schema: schema,
					ListenConnConfig: pgtest.ListenConnConfig(b), Logger: slog.New(slog.DiscardHandler)})
				require.NoError(b, err)
				b.StartTimer()
				start := time.Now()
				require.NoError(b, r.Start(context.Background()))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				require.NoError(b, outboxdrain.Wait(ctx, pool, schema), "the relay did not publish every row")
				cancel()
				b.ReportMetric(float64(rows)/time.Since(start).Seconds(), "msgs/s")
				require.NoError(b, r.Stop(context.Background()))
			}
			load, _ := os.ReadFile("/proc/loadavg")
			b.Logf("load average: %s", strings.Join(strings.Fields(string(load))[:3], " "))
		})
	}
}

// Backlog writes n rows to topic in the outbox of schema, 1000 per
// transaction, and vacuums the outbox, as the relay benchmark of
// cmd/pgbox-bench does.
func Backlog(tb testing.TB, pool *pgxpool.Pool, schema, topic string, n int) {
	tb.Helper()
	ctx := context.Background()
	box, err := outbox.New(pool, outbox.Config{Schema: schema})
	require.NoError(tb, err)
	msgs := make([]outbox.Message, 1000)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Payload: []byte(`{"bench":true}`)}
	}
	for range n / len(msgs) {
		require.NoError(tb, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := box.Write(ctx, tx, msgs...)
			return err
		}))
	}
	_, err = pool.Exec(ctx, ident.Render("VACUUM ANALYZE /* schema */outbox", schema))
	require.NoError(tb, err)
}
