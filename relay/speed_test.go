package relay_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox/internal/outboxdrain"
	"github.com/pgbox/pgbox/internal/proccpu"
	"github.com/pgbox/pgbox/internal/tables"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// The relay's ceilings on the same table: plain SQL loops, each run by
// relay.WorkersDefault workers taking batches of relay.BatchSizeDefault.
const (
	// rawPublishSQL claims a batch of pending rows with FOR UPDATE SKIP
	// LOCKED and marks them published in one statement, reading what a
	// publish needs: no ordering keys, leases, attempts or outcomes, and
	// nothing published.
	rawPublishSQL = `
UPDATE /* schema */outbox AS o SET status = ` + tables.OutboxPublished + `, published_at = now(), attempts = o.attempts + 1
FROM (SELECT id, bucket FROM /* schema */outbox
      WHERE status = ` + tables.OutboxPending + ` AND available_at <= now()
      ORDER BY available_at, seq LIMIT $1 FOR UPDATE SKIP LOCKED) AS c
WHERE o.id = c.id AND o.bucket = c.bucket
RETURNING o.id, o.topic, o.event_type, o.payload, o.metadata`

	// lockHeadsSQL and markPublishedSQL are the one-write shape of a
	// relay (docs/design.md, The relay's throughput): in one transaction,
	// lock the heads of their keys with FOR UPDATE SKIP LOCKED, writing
	// nothing, publish them, and mark them published.
	lockHeadsSQL = `
SELECT o.id::text, o.bucket, o.payload FROM /* schema */outbox AS o
WHERE o.status = ` + tables.OutboxPending + ` AND o.available_at <= now() AND ` + tables.OutboxAtKeyHead + `
ORDER BY o.available_at, o.seq LIMIT $1 FOR UPDATE SKIP LOCKED`
	markPublishedSQL = `
UPDATE /* schema */outbox AS o SET status = ` + tables.OutboxPublished + `, published_at = now(), attempts = o.attempts + 1
FROM unnest($1::uuid[], $2::int[]) AS r(id, bucket)
WHERE o.id = r.id AND o.bucket = r.bucket`
)

// BenchmarkDrain drains a backlog of outbox rows, side by side on the same
// table and data: the relay to Watermill's GoChannel (a subscriber that
// takes everything), the plain-SQL ceiling (raw), and the one-write shape
// publishing to GoChannel (one-write). Each iteration writes a fresh
// backlog; msgs/s is reported, with the CPU time used per message by this
// process (the relay's Go side and GoChannel's) and by every PostgreSQL
// process of the machine (0 when the server runs elsewhere), and the load
// average logged. Run with:
//
//	go test ./relay -run '^$' -bench Drain -benchtime 1x -count 5
func BenchmarkDrain(b *testing.B) {
	const rows = 20_000
	systems := []struct {
		name  string
		drain func(b *testing.B, tb *testBundle, pub message.Publisher)
	}{
		{"relay", func(b *testing.B, tb *testBundle, pub message.Publisher) {
			r := tb.start(b, relay.Config{Publisher: pub})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(b, outboxdrain.Wait(ctx, tb.pool, tb.schema), "the relay did not publish every row")
			// Stopped now, not when the benchmark ends: an idle relay polls,
			// and its claims would be charged to the runs after it.
			require.NoError(b, r.Stop(ctx))
		}},
		{"raw", func(b *testing.B, tb *testBundle, _ message.Publisher) {
			q := tb.sql(rawPublishSQL)
			loop(b, tb, func(ctx context.Context, tx pgx.Tx) (int, error) {
				rs, err := tx.Query(ctx, q, relay.BatchSizeDefault)
				if err != nil {
					return 0, err
				}
				n := 0
				for rs.Next() {
					n++
				}
				return n, rs.Err()
			})
		}},
		{"one-write", func(b *testing.B, tb *testBundle, pub message.Publisher) {
			lock, mark := tb.sql(lockHeadsSQL), tb.sql(markPublishedSQL)
			loop(b, tb, func(ctx context.Context, tx pgx.Tx) (int, error) {
				rs, err := tx.Query(ctx, lock, relay.BatchSizeDefault)
				if err != nil {
					return 0, err
				}
				var (
					ids     []string
					buckets []int32
					msgs    []*message.Message
				)
				for rs.Next() {
					var (
						id      string
						bucket  int32
						payload []byte
					)
					if err := rs.Scan(&id, &bucket, &payload); err != nil {
						return 0, err
					}
					ids, buckets, msgs = append(ids, id), append(buckets, bucket), append(msgs, message.NewMessage(id, payload))
				}
				if err := rs.Err(); err != nil {
					return 0, err
				}
				for _, m := range msgs {
					if err := pub.Publish("bench", m); err != nil {
						return 0, err
					}
				}
				_, err = tx.Exec(ctx, mark, ids, buckets)
				return len(ids), err
			})
		}},
	}
	for _, sys := range systems {
		b.Run(sys.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				tb := setup(b)
				msgs := make([]outbox.Message, 1000)
				for i := range msgs {
					msgs[i] = outbox.Message{Topic: "bench", Payload: []byte(`{"bench":true}`)}
				}
				for range rows / len(msgs) {
					tb.write(b, msgs...)
				}
				_, err := tb.pool.Exec(context.Background(), tb.sql("VACUUM ANALYZE /* schema */outbox"))
				require.NoError(b, err)
				pub := goChannel(b)
				b.StartTimer()
				start := time.Now()
				db0, self0 := cpuTime()
				sys.drain(b, tb, pub)
				b.ReportMetric(rows/time.Since(start).Seconds(), "msgs/s")
				db1, self1 := cpuTime()
				b.ReportMetric(float64((self1-self0).Microseconds())/rows, "go-cpu-µs/msg")
				b.ReportMetric(float64((db1-db0).Microseconds())/rows, "db-cpu-µs/msg")
			}
			load, _ := os.ReadFile("/proc/loadavg")
			b.Logf("load average: %s", strings.Join(strings.Fields(string(load))[:3], " "))
		})
	}
}

// goChannel returns a GoChannel publisher whose subscriber to "bench"
// takes everything, closed when b ends.
func goChannel(b *testing.B) message.Publisher {
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10_000}, watermill.NopLogger{})
	b.Cleanup(func() { _ = ps.Close() })
	sub, err := ps.Subscribe(context.Background(), "bench")
	require.NoError(b, err)
	go func() {
		for m := range sub {
			m.Ack()
		}
	}()
	return ps
}

// loop runs batch, a transaction's work that returns how many rows it
// took, from relay.WorkersDefault workers until each finds none.
func loop(b *testing.B, tb *testBundle, batch func(context.Context, pgx.Tx) (int, error)) {
	g, ctx := errgroup.WithContext(context.Background())
	for range relay.WorkersDefault {
		g.Go(func() error {
			for {
				var n int
				err := pgx.BeginFunc(ctx, tb.pool, func(tx pgx.Tx) (err error) {
					n, err = batch(ctx, tx)
					return err
				})
				if err != nil || n == 0 {
					return err
				}
			}
		})
	}
	require.NoError(b, g.Wait())
}

// cpuTime returns the CPU time (user and system) used so far by every
// PostgreSQL process on this machine (0 where there is none), and by this
// process.
func cpuTime() (db, self time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return proccpu.AllPostgres(), time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
