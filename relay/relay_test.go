package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/internal/telemetry/telemetrytest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// recorder is a Watermill publisher that keeps what it is given, and fails
// when fail says so.
type recorder struct {
	fail func(topic string, m *message.Message) error
	mu   sync.Mutex
	got  []*message.Message
	tops []string
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		if r.fail != nil {
			if err := r.fail(topic, m); err != nil {
				return err
			}
		}
		r.got = append(r.got, m)
		r.tops = append(r.tops, topic)
	}
	return nil
}

func (r *recorder) Close() error { return nil }

// published returns the UUIDs published so far, in order.
func (r *recorder) published() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.got))
	for i, m := range r.got {
		out[i] = m.UUID
	}
	return out
}

type testBundle struct {
	outbox *outbox.Outbox
	pool   *pgxpool.Pool
	schema string
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	return setupOn(t, pgtest.Pool(t))
}

// setupOn is setup with the Outbox, the Relay and the test's own queries on
// pool.
func setupOn(t testing.TB, pool *pgxpool.Pool) *testBundle {
	t.Helper()
	b := &testBundle{pool: pool, schema: pgtest.Schema(t)}
	var err error
	b.outbox, err = outbox.New(b.pool, outbox.Config{Schema: b.schema})
	require.NoError(t, err)
	return b
}

func (b *testBundle) sql(q string) string { return ident.Render(q, b.schema) }

// write commits msgs in one transaction and returns their ids.
func (b *testBundle) write(t testing.TB, msgs ...outbox.Message) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	ids, err := b.outbox.Write(ctx, tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return ids
}

func (b *testBundle) start(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	r := b.newRelay(t, cfg)
	require.NoError(t, r.Start(context.Background()))
	return r
}

// newRelay returns a relay on the bundle's schema, with the tests' quick
// timings where cfg leaves them unset, not started, and stopped when the
// test ends.
func (b *testBundle) newRelay(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.Schema = b.schema
	if cfg.ListenConnConfig == nil && !cfg.PollOnly {
		cfg.ListenConnConfig = pgtest.ListenConnConfig(t)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.RetryBackoffFunc == nil {
		cfg.RetryBackoffFunc = func(int) time.Duration { return 10 * time.Millisecond }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	r, err := relay.New(b.pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

func (b *testBundle) waitFor(t testing.TB, q string, args ...any) {
	t.Helper()
	require.Eventually(t, func() bool {
		var ok bool
		require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(q), args...).Scan(&ok))
		return ok
	}, 30*time.Second, 10*time.Millisecond, "waiting for: %s", q)
}

func (b *testBundle) waitPublished(t testing.TB) {
	t.Helper()
	b.waitFor(t, "SELECT NOT EXISTS (SELECT 1 FROM /* schema */outbox WHERE status IN ('pending', 'running'))")
}

func strs(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

func TestRelayPublishesCommittedRowsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	var committed []uuid.UUID
	for i := range 30 {
		committed = append(committed, b.write(t, outbox.Message{
			Topic: "orders", EventType: "OrderPlaced", OrderingKey: fmt.Sprintf("order-%d", i%3),
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Metadata: map[string]string{"tenant": "acme"},
		})...)
	}
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	rolledBack, err := b.outbox.Write(ctx, tx, outbox.Message{Topic: "orders", Payload: []byte("never")})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	pub := &recorder{}
	b.start(t, relay.Config{Publisher: pub})
	b.waitPublished(t)

	require.ElementsMatch(t, strs(committed), pub.published())
	require.NotContains(t, pub.published(), rolledBack[0].String())
	pub.mu.Lock()
	first, topic := pub.got[0], pub.tops[0]
	pub.mu.Unlock()
	require.Equal(t, "orders", topic)
	require.Equal(t, "OrderPlaced", first.Metadata.Get(pgbox.MetadataEventType))
	require.Contains(t, []string{"order-0", "order-1", "order-2"}, first.Metadata.Get(pgbox.MetadataOrderingKey))
	require.Equal(t, "acme", first.Metadata.Get("tenant"))

	var published int
	require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT count(*) FROM /* schema */outbox WHERE status = 'published' AND published_at IS NOT NULL")).Scan(&published))
	require.Equal(t, 30, published)
}

// A relay on a pool whose query mode sends parameters without their types
// (as a user behind PgBouncer may configure) records what became of each
// row, a failed publish included, so each row is published once.
func TestRelayInUntypedQueryModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.UntypedModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setupOn(t, pgtest.NewPoolMode(t, mode, 4))
			msgs := make([]outbox.Message, 20)
			for i := range msgs {
				msgs[i] = outbox.Message{Topic: "orders", OrderingKey: fmt.Sprint("order-", i%4), Payload: []byte{byte(i)}}
			}
			msgs[7].Topic = "flaky"
			ids := b.write(t, msgs...)

			failed := false
			pub := &recorder{fail: func(topic string, _ *message.Message) error {
				if topic == "flaky" && !failed {
					failed = true
					return errors.New("broker unavailable")
				}
				return nil
			}}
			b.start(t, relay.Config{Publisher: pub})
			b.waitPublished(t)

			require.ElementsMatch(t, strs(ids), pub.published(), "each row published once")
			var attempts int
			var lastError string
			require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT attempts, last_error FROM /* schema */outbox WHERE id = $1"), ids[7]).Scan(&attempts, &lastError))
			require.Equal(t, 2, attempts)
			require.Equal(t, "publish: broker unavailable", lastError)
		})
	}
}

// Transaction A takes the lower id but commits after B: a relay reading
// "id greater than the last one seen" would skip A for ever. Both are
// published.
func TestOutOfOrderCommitsAreNotSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pub := &recorder{}
	b.start(t, relay.Config{Publisher: pub})

	lower, higher := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	require.Less(t, lower.String(), higher.String())

	txA, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = txA.Rollback(ctx) }()
	_, err = b.outbox.Write(ctx, txA, outbox.Message{ID: lower, Topic: "t"})
	require.NoError(t, err)

	b.write(t, outbox.Message{ID: higher, Topic: "t"})
	require.Eventually(t, func() bool { return len(pub.published()) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{higher.String()}, pub.published())

	require.NoError(t, txA.Commit(ctx))
	b.waitPublished(t)
	require.Equal(t, []string{higher.String(), lower.String()}, pub.published())
}

// A row that turns pending behind the claims' frontier is still published:
// written in a transaction that began before the rows the claims have
// since taken, it is found by the next claim that reads the pending index
// from its start. With claims that never did, it would wait for ever.
func TestALateRowIsClaimedByAFullClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pub := &recorder{}
	r := b.newRelay(t, relay.Config{Publisher: pub})
	relay.SetFrontier(r, 0, 300*time.Millisecond)
	require.NoError(t, r.Start(ctx))

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	late := uuid.Must(uuid.NewV7())
	_, err = b.outbox.Write(ctx, tx, outbox.Message{ID: late, Topic: "t"})
	require.NoError(t, err)
	// Rows written after the late one's transaction began, and published:
	// the frontier is past its available_at.
	var early []uuid.UUID
	for range 2 {
		early = append(early, b.write(t, outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "t"})...)
		b.waitPublished(t)
	}
	var lateAt, earlyAt time.Time
	require.NoError(t, tx.QueryRow(ctx, b.sql("SELECT available_at FROM /* schema */outbox WHERE id = $1"), late).Scan(&lateAt))
	require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT available_at FROM /* schema */outbox WHERE id = $1"), early[0]).Scan(&earlyAt))
	require.True(t, lateAt.Before(earlyAt), "the late row (%s) is older than the ones published (%s)", lateAt, earlyAt)
	require.NoError(t, tx.Commit(ctx))

	b.waitPublished(t)
	require.Equal(t, append(strs(early), late.String()), pub.published())
}

// The claims' frontier stays behind a transaction still open, so that its
// row, older than the rows published meanwhile, is published once
// committed without waiting for a full claim (none comes within the hour
// here); and once no transaction that old is open, the frontier moves up
// to the rows claimed, however wide the margin allowed (an hour here): a
// claim does not step over an hour of rows already published.
func TestTheFrontierWaitsForOpenTransactionsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pub := &recorder{}
	r := b.newRelay(t, relay.Config{Publisher: pub})
	relay.SetFrontier(r, time.Hour, time.Hour)
	require.NoError(t, r.Start(ctx))
	availableAt := func(id uuid.UUID) (at time.Time) {
		require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT available_at FROM /* schema */outbox WHERE id = $1"), id).Scan(&at))
		return at
	}

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	late := uuid.Must(uuid.NewV7())
	_, err = b.outbox.Write(ctx, tx, outbox.Message{ID: late, Topic: "t"})
	require.NoError(t, err)
	var lateAt time.Time
	require.NoError(t, tx.QueryRow(ctx, "SELECT now()").Scan(&lateAt))
	early := b.write(t, outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "t"})
	b.waitPublished(t)
	require.True(t, lateAt.Before(availableAt(early[0])))
	from := relay.NextClaimFrom(r)
	require.NotNil(t, from)
	require.False(t, from.After(lateAt), "the frontier (%s) is behind the transaction still open (%s)", from, lateAt)
	require.NoError(t, tx.Commit(ctx))
	b.waitPublished(t)
	require.Equal(t, append(strs(early), late.String()), pub.published())

	last := b.write(t, outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "t"})
	b.waitPublished(t)
	lastAt := availableAt(last[0])
	from = relay.NextClaimFrom(r)
	require.NotNil(t, from)
	require.False(t, from.After(lastAt), "the frontier (%s) is not past the row claimed (%s)", from, lastAt)
	// Other tests' transactions in the database may hold it back, but not
	// for anything like the margin.
	require.True(t, from.After(lastAt.Add(-10*time.Minute)), "the frontier (%s) stays the margin behind the row claimed (%s)", from, lastAt)
}

// An ordering key's backlog, older than the frontier, is not held back by
// it: each of the key's rows becomes claimable only when the one before it
// is published, by which time the claims of other rows have moved the
// frontier past it. With claims that read from the start only once (the
// full-claim interval is an hour here), the key's rows, written an hour
// ago, must still all be published, in order: the relay rewinds the
// frontier to each published keyed row's created_at.
func TestAKeyedBacklogBehindTheFrontierIsPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var keyed []outbox.Message
	for range 20 {
		keyed = append(keyed, outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "t", OrderingKey: "order-7"})
	}
	want := strs(b.write(t, keyed...))
	_, err := b.pool.Exec(ctx, b.sql("UPDATE /* schema */outbox SET created_at = now() - interval '1 hour', available_at = now() - interval '1 hour'"))
	require.NoError(t, err)
	others := make([]outbox.Message, 500)
	for i := range others {
		others[i] = outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "t"}
	}
	b.write(t, others...)

	pub := &recorder{}
	r := b.newRelay(t, relay.Config{Publisher: pub, BatchSize: 10})
	relay.SetFrontier(r, 0, time.Hour)
	require.NoError(t, r.Start(ctx))
	b.waitPublished(t)
	var got []string
	for _, id := range pub.published() {
		if slices.Contains(want, id) {
			got = append(got, id)
		}
	}
	require.Equal(t, want, got, "the key's rows, in order")
}

// An outbox whose rows all have ordering keys is still claimed from the
// frontier: after a batch with keyed rows, the next claim starts at the
// earliest one's created_at, less the margin, instead of at the pending
// index's start, which would read the entry of every row claimed since the
// partition was last vacuumed. Here 40 keys of 5 rows each are published,
// with full claims once an hour: only the first claims, before any row was
// taken, read from the start.
func TestKeyedRowsKeepTheClaimsAtTheFrontier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	claims := pgtest.NewFullClaims("coalesce($2::timestamptz", 1)
	b := setupOn(t, pgtest.TracedPool(t, pgtest.Pool(t), claims.Tracer()))
	msgs := make([]outbox.Message, 200)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "t", OrderingKey: fmt.Sprintf("order-%d", i%40)}
	}
	b.write(t, msgs...)

	const workers = 2
	r := b.newRelay(t, relay.Config{Publisher: &recorder{}, BatchSize: 10, Workers: workers})
	relay.SetFrontier(r, 0, time.Hour)
	require.NoError(t, r.Start(ctx))
	b.waitPublished(t)
	claims.RequireAtMost(t, 20, workers) // 200 rows in batches of 10
}

func TestPublishFailuresAreRetriedAndRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.write(t, outbox.Message{Topic: "flaky"})[0]

	calls := 0
	pub := &recorder{fail: func(string, *message.Message) error {
		calls++
		if calls <= 2 {
			return fmt.Errorf("broker unavailable (call %d)", calls)
		}
		return nil
	}}
	b.start(t, relay.Config{Publisher: pub})
	b.waitPublished(t)

	require.Equal(t, []string{id.String()}, pub.published())
	var (
		attempts int
		errs     []map[string]any
	)
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT attempts, errors FROM /* schema */outbox")).Scan(&attempts, &errs))
	require.Equal(t, 3, attempts)
	require.Len(t, errs, 2)
	require.Equal(t, "publish: broker unavailable (call 1)", errs[0]["error"])
	require.EqualValues(t, 2, errs[1]["attempt"])
}

func TestMaxAttemptsMarksARowDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, outbox.Message{Topic: "too-big"}, outbox.Message{Topic: "fine"})
	pub := &recorder{fail: func(topic string, _ *message.Message) error {
		if topic == "too-big" {
			return errors.New("message exceeds the broker's limit")
		}
		return nil
	}}
	reader := sdkmetric.NewManualReader()
	b.start(t, relay.Config{Publisher: pub, MaxAttempts: 3, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	b.waitPublished(t)

	var status, lastError string
	var attempts int
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT status, attempts, last_error FROM /* schema */outbox WHERE topic = 'too-big'")).Scan(&status, &attempts, &lastError))
	require.Equal(t, "dead", status)
	require.Equal(t, 3, attempts)
	require.Equal(t, "publish: message exceeds the broker's limit", lastError)
	require.Len(t, pub.published(), 1, "the healthy row is published all the same")
	// Counted once the relay has seen its completion commit, a moment
	// after the test can see the row.
	require.Eventually(t, func() bool {
		return telemetrytest.Sums(t, reader, "pgbox.relay.dead", "pgbox.topic")["too-big"] == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, map[string]int64{"too-big": 1}, telemetrytest.Sums(t, reader, "pgbox.relay.dead", "pgbox.topic"))
}

// A row whose lease expired on its last attempt (its relay was killed, or
// stalled, mid-publish) is dead when a relay next finds it, not published
// again.
func TestARowWhoseLastLeaseExpiresIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.write(t, outbox.Message{Topic: "slow"})[0]
	// As a relay that claimed the row on its only attempt and died leaves it.
	_, err := b.pool.Exec(context.Background(), b.sql(`UPDATE /* schema */outbox
		SET status = 'running', attempts = 1, claim_token = 42, available_at = now() - interval '1 second' WHERE id = $1`), id)
	require.NoError(t, err)
	pub := &recorder{}
	reader := sdkmetric.NewManualReader()
	b.start(t, relay.Config{Publisher: pub, MaxAttempts: 1, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})

	b.waitFor(t, "SELECT status = 'dead' FROM /* schema */outbox WHERE id = $1", id)
	require.Eventually(t, func() bool {
		return telemetrytest.Sums(t, reader, "pgbox.relay.dead", "pgbox.topic")["slow"] == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, pub.published())
	var lastError string
	var attempts int
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT attempts, last_error FROM /* schema */outbox WHERE id = $1"), id).Scan(&attempts, &lastError))
	require.Equal(t, 1, attempts)
	require.Contains(t, lastError, "lease expired")
}

// Rows that share a key are published in commit order, one in flight at a
// time, whatever fails in between and however many workers run.
func TestPerKeyOrderSurvivesFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const keys, perKey = 8, 15
	want := map[string][]string{}
	for range perKey {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			id := b.write(t, outbox.Message{Topic: "t", OrderingKey: key})[0]
			want[key] = append(want[key], id.String())
		}
	}
	failed := map[string]bool{}
	pub := &recorder{fail: func(_ string, m *message.Message) error {
		if !failed[m.UUID] && m.UUID[len(m.UUID)-1]%3 == 0 {
			failed[m.UUID] = true
			return errors.New("transient")
		}
		return nil
	}}
	b.start(t, relay.Config{Publisher: pub, Workers: 4, BatchSize: 5})
	b.waitPublished(t)

	pub.mu.Lock() // the relay is still running: read what it published under the recorder's lock
	defer pub.mu.Unlock()
	// Each message is published once: one that went out is never sent
	// again because a neighbour of its batch failed.
	got := map[string][]string{}
	for _, m := range pub.got {
		key := m.Metadata.Get(pgbox.MetadataOrderingKey)
		got[key] = append(got[key], m.UUID)
	}
	require.Equal(t, want, got)
	require.NotEmpty(t, failed, "some publishes must have failed, or this test proves nothing")
}

func TestNotificationWakesAnIdleRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := &recorder{}
	b.start(t, relay.Config{Publisher: pub, PollInterval: time.Hour})
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE application_name = 'pgbox relay listener' AND query LIKE 'LISTEN %"+b.schema+"%')")

	id := b.write(t, outbox.Message{Topic: "t"})[0]
	require.Eventually(t, func() bool { return len(pub.published()) == 1 }, 20*time.Second, 5*time.Millisecond,
		"only a notification can wake a relay that polls hourly")
	require.Equal(t, id.String(), pub.published()[0])
}

// Several relays at once publish every row, and each row is recorded once.
func TestSeveralRelaysShareTheWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var all []uuid.UUID
	for range 10 {
		msgs := make([]outbox.Message, 40)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: "t"}
		}
		all = append(all, b.write(t, msgs...)...)
	}
	pubs := make([]*recorder, 3)
	for i := range pubs {
		// A publish that takes a moment, as a broker's does, so one relay
		// cannot drain the outbox before the others have started.
		pubs[i] = &recorder{fail: func(string, *message.Message) error { time.Sleep(2 * time.Millisecond); return nil }}
		cfg := relay.Config{Publisher: pubs[i], BatchSize: 10, Schema: b.schema, PollInterval: 20 * time.Millisecond}
		r, err := relay.New(pgtest.NewPool(t, 4), cfg)
		require.NoError(t, err)
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	}
	b.waitPublished(t)

	seen := map[string]int{}
	busy := 0
	for _, p := range pubs {
		if len(p.published()) > 0 {
			busy++
		}
		for _, id := range p.published() {
			seen[id]++
		}
	}
	require.Len(t, seen, len(all))
	for _, id := range all {
		require.Equal(t, 1, seen[id.String()], "no lease expired, so each row is published once")
	}
	require.GreaterOrEqual(t, busy, 2, "the relays must have shared the work")
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	_, err := relay.New(nil, relay.Config{Publisher: &recorder{}})
	require.ErrorContains(t, err, "pool is nil")
	_, err = relay.New(pool, relay.Config{})
	require.ErrorContains(t, err, "Config.Publisher is nil")
	_, err = relay.New(pool, relay.Config{Publisher: &recorder{}, MaxAttempts: -1, BatchSize: -1})
	require.ErrorContains(t, err, "Config.MaxAttempts is -1")
	require.ErrorContains(t, err, "Config.BatchSize is -1")
	_, err = relay.New(pool, relay.Config{Publisher: &recorder{}, Lease: 10 * time.Second, PublishTimeout: 6 * time.Second})
	require.ErrorContains(t, err, "Config.PublishTimeout is 6s: it must be positive and at most half the Lease (5s)")
	_, err = relay.New(pool, relay.Config{Publisher: &recorder{}, PublishTimeout: -time.Second})
	require.ErrorContains(t, err, "Config.PublishTimeout is -1s")
	_, err = relay.New(pool, relay.Config{Publisher: &recorder{}, Lease: 200 * time.Millisecond})
	require.NoError(t, err, "PublishTimeout defaults to half the Lease")
}

func TestStartFailsFastOnAnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	r, err := relay.New(pgtest.Pool(t), relay.Config{Publisher: &recorder{}, Schema: pgtest.EmptySchema(t)})
	require.NoError(t, err)
	err = r.Start(context.Background())
	require.ErrorIs(t, err, pgbox.ErrSchemaNotMigrated)
	require.NoError(t, r.Stop(context.Background()))
}
