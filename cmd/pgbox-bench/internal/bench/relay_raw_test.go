package bench

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// The raw relay is a ceiling only if it does the relay's work: every row
// published once, and marked published.
func TestRawRelayPublishesEveryRowOnceAndMarksIt(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("makes a database: not in -short")
	}
	ctx := context.Background()
	dbURL := ownDatabase(t)
	e := &env{cfg: Config{URL: dbURL}.withDefaults(), log: slog.New(slog.DiscardHandler)}
	var (
		mu        sync.Mutex
		published = map[string]int{}
		wrong     []rawMsg // not the topic and payload written
	)
	count := func(context.Context, *pgxpool.Pool) (rawPublish, func(), error) {
		return func(_ context.Context, _ pgx.Tx, msgs []rawMsg) error {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				if m.topic != "bench" || string(m.payload) != string(benchPayload) {
					wrong = append(wrong, m)
				}
				published[m.id]++
			}
			return nil
		}, func() {}, nil
	}
	const n = 1234 // not a whole number of batches
	f, err := e.rawRelay(n, count)(ctx, scale{})
	require.NoError(t, err)
	require.Positive(t, f["msgs/s"])
	require.Empty(t, wrong)
	require.Len(t, published, n)
	for id, times := range published {
		require.Equal(t, 1, times, "row %s", id)
	}
	pool, _, err := newPool(ctx, dbURL, 1)
	require.NoError(t, err)
	defer pool.Close()
	var left int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM bench_pgbox.outbox WHERE status <> 'published' OR published_at IS NULL").Scan(&left))
	require.Zero(t, left)
}

// The relay targets judge the lowest ratio of their cases, and name it;
// a broker's other wirings, measured beside, are not judged.
func TestLowestRatioTargetNamesTheWorstCase(t *testing.T) {
	t.Parallel()
	r := &Report{Results: []Result{
		{Scenario: "relay", Setting: "50000 rows → GoChannel", Ratios: []Ratio{{Peer: "raw", Median: 0.9, Min: 0.85, Max: 0.95}}},
		{Scenario: "relay", Setting: "50000 rows → NATS JetStream", Ratios: []Ratio{{Peer: "raw", Median: 0.5, Min: 0.4, Max: 0.6}}},
		{Scenario: "relay", Setting: "50000 rows → RabbitMQ", Ratios: []Ratio{{Peer: "raw", Median: 0.7, Min: 0.6, Max: 0.8}}},
		{Scenario: "relay", Setting: "50000 rows → watermill-sql, AtomicPublisher", Ratios: []Ratio{{Peer: "raw", Median: 0.3}}}, // another wiring
		{Scenario: "relay", Setting: "50000 rows → Kafka (kfake, in process), Sarama", Ratios: []Ratio{{Peer: "raw", Median: 0.3}}},
		{Scenario: "relay-scaling", Setting: "50000 rows → RabbitMQ", Ratios: []Ratio{{Peer: "raw", Median: 0.1}}},
	}}
	figures := map[string]string{}
	for _, tg := range targets {
		figure, met, ok := tg.check(r)
		if ok {
			figures[tg.goal] = figure
			require.Equal(t, strings.Contains(tg.goal, "GoChannel"), met, tg.goal)
		}
	}
	require.Equal(t, map[string]string{
		"relay to GoChannel: at least 0.8× the plain SQL loop (raw)":                                                       "0.90× at least (50000 rows → GoChannel; runs 0.85–0.95)",
		"relay to each broker, through the publisher pgbox recommends for it: at least 0.8× the broker's own client (raw)": "0.50× at least (50000 rows → NATS JetStream; runs 0.40–0.60)",
	}, figures)
}
