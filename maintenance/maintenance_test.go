package maintenance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/internal/telemetry/telemetrytest"
	"github.com/pgbox/pgbox/maintenance"
)

// Retention deletes done messages, conflict records and published outbox
// rows past their window, expired idempotency keys, and the rows of
// processes long gone, in batches; it
// never deletes dead, discarded, pending or running messages, nor dead or
// unpublished outbox rows.
func TestRetentionDeletesOnlyWhatItShould(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, received_at)
		SELECT 'a', 'old-' || g, 'T', 'done', 1, 3, '\x00'::bytea, ''::bytea, now() - interval '8 days', now() - interval '9 days'
		FROM generate_series(1, 2500) AS g`)
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, received_at)
		VALUES ('a', 'recent', 'T', 'done', 1, 3, '\x00', '', now() - interval '1 day', now() - interval '1 day'),
		       ('a', 'dead', 'T', 'dead', 3, 3, '\x00', '', NULL, now() - interval '30 days'),
		       ('a', 'discarded', 'T', 'discarded', 3, 3, '\x00', '', NULL, now() - interval '30 days'),
		       ('a', 'pending', 'T', 'pending', 0, 3, '\x00', '', NULL, now() - interval '30 days'),
		       ('a', 'running', 'T', 'running', 1, 3, '\x00', '', NULL, now() - interval '30 days')`)
	b.exec(t, `
		INSERT INTO /* schema */inbox_conflicts (consumer, message_id, received_at, payload_hash, payload)
		VALUES ('a', 'x', now() - interval '8 days', '\x00', ''), ('a', 'y', now() - interval '8 days', '\x00', ''),
		       ('a', 'z', now() - interval '8 days', '\x00', ''), ('a', 'x', now(), '\x00', '')`)
	b.exec(t, `
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, published_at, created_at)
		SELECT gen_random_uuid(), 'old', 'T', '', 'published', now() - interval '8 days', now() - interval '8 days'
		FROM generate_series(1, 1200)`)
	b.exec(t, `
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, published_at, created_at)
		VALUES (gen_random_uuid(), 'recent', 'T', '', 'published', now() - interval '1 day', now()),
		       (gen_random_uuid(), 'dead', 'T', '', 'dead', NULL, now() - interval '30 days'),
		       (gen_random_uuid(), 'pending', 'T', '', 'pending', NULL, now() - interval '30 days')`)
	b.exec(t, `
		INSERT INTO /* schema */idempotency_keys (route, key, fingerprint, state, lock_token, locked_until, status, headers, body, expires_at)
		VALUES ('r', 'expired-1', '\x00', 'done', NULL, NULL, 200, '{}', '', now() - interval '1 hour'),
		       ('r', 'expired-2', '\x00', 'done', NULL, NULL, 200, '{}', '', now() - interval '1 hour'),
		       ('r', 'leased', '\x00', 'in_progress', 1, now() + interval '1 hour', NULL, NULL, NULL, now() - interval '1 hour'),
		       ('r', 'fresh', '\x00', 'done', NULL, NULL, 200, '{}', '', now() + interval '1 hour')`)
	b.exec(t, `
		INSERT INTO /* schema */processes (kind, consumer, name, host, pid, version, heartbeat_ms, last_seen_at)
		VALUES ('dispatcher', 'a', 'gone-long-ago', 'h', 1, 'v', 10000, now() - interval '2 days'),
		       ('dispatcher', 'a', 'gone-lately', 'h', 2, 'v', 10000, now() - interval '2 hours')`)

	reader := sdkmetric.NewManualReader()
	m := b.start(t, maintenance.Config{
		BatchSize:      1000,
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		PruneInterval:  time.Hour, // one run: the one the leader makes at once
		ReplayInterval: -1,
	})
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */river_job WHERE kind = 'pgbox.prune' AND state = 'completed')")

	rows, err := pgtest.Pool(t).Query(context.Background(), b.sql("SELECT message_id FROM /* schema */inbox ORDER BY 1"))
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"dead", "discarded", "pending", "recent", "running"}, left)
	require.EqualValues(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox_conflicts"))
	rows, err = pgtest.Pool(t).Query(context.Background(), b.sql("SELECT topic FROM /* schema */outbox ORDER BY 1"))
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"dead", "pending", "recent"}, left)
	rows, err = pgtest.Pool(t).Query(context.Background(), b.sql("SELECT key FROM /* schema */idempotency_keys ORDER BY 1"))
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"fresh", "leased"}, left)
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */processes WHERE name = 'gone-long-ago'"))
	require.EqualValues(t, 1, b.count(t, "SELECT count(*) FROM /* schema */processes WHERE name = 'gone-lately'"))

	// The run recorded what it did: 3 + 1 + 2 + 1 + 1 statements of at
	// most 1000 rows (inbox, conflicts, outbox, idempotency keys,
	// processes), and 5 tables' counts.
	jobs := b.completedJobs(t, "pgbox.prune")
	require.Len(t, jobs, 1)
	var out struct {
		Deleted    map[string]int64 `json:"deleted"`
		Partial    bool             `json:"partial"`
		Statements int              `json:"statements"`
	}
	require.NoError(t, json.Unmarshal(jobs[0].Output, &out))
	require.Equal(t, map[string]int64{"inbox": 2500, "inbox_conflicts": 3, "outbox": 1200, "idempotency_keys": 2, "processes": 1}, out.Deleted)
	require.Equal(t, 8, out.Statements)
	require.False(t, out.Partial)
	require.Equal(t, m.ID(), jobs[0].EnqueuedBy)

	require.Equal(t, map[string]int64{"inbox": 2500, "inbox_conflicts": 3, "outbox": 1200, "idempotency_keys": 2, "processes": 1},
		telemetrytest.Sums(t, reader, "pgbox.maintenance.deleted", "pgbox.table"))
}

// Pruning 200,000 done messages, in 1,000-row statements, does not hold up
// the dispatcher: messages received while the prune runs are handled
// while it runs. Progress is read from the database between the prune's
// statements, never from a clock.
func TestLargePruneDoesNotBlockWorkers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("inserts 200,000 rows")
	}
	ctx := context.Background()
	b := setup(t)
	const history = 200_000
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, received_at)
		SELECT 'history', 'h-' || g, 'Old', 'done', 1, 3, '\x00'::bytea, ''::bytea,
		       now() - interval '30 days' + g * interval '1 millisecond', now() - interval '30 days'
		FROM generate_series(1, $1::int) AS g`, history)
	b.exec(t, "CREATE TABLE /* schema */effects (id text PRIMARY KEY)")
	b.exec(t, "ANALYZE /* schema */inbox")

	pool := pgtest.Pool(t)
	live, err := inbox.New(pool, inbox.Config{Consumer: "live", Schema: b.schema})
	require.NoError(t, err)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Inbox: live,
		Handlers: map[string]dispatcher.Handler{"Live": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			_, err := tx.Exec(ctx, b.sql("INSERT INTO /* schema */effects (id) VALUES ($1)"), m.ID)
			return err
		})},
		PollInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })

	stop := make(chan struct{})
	var producer sync.WaitGroup
	producer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			_, err := live.Receive(ctx, inbox.Message{ID: fmt.Sprintf("live-%d", i), EventType: "Live"})
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	defer func() { close(stop); producer.Wait() }()

	// Between the prune's statements, read how far the prune and the
	// workers have got.
	type sample struct{ historyLeft, effects int64 }
	var (
		mu      sync.Mutex
		samples []sample
		largest int64
		batches int
	)
	m, err := maintenance.New(pool, maintenance.Config{BatchSize: 1000, PruneInterval: time.Hour, ReplayInterval: -1, Schema: b.schema})
	require.NoError(t, err)
	maintenance.SetAfterBatch(m, func(table string, n int64) {
		if table != "inbox" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		largest = max(largest, n)
		batches++
		if batches%20 != 0 {
			return
		}
		var s sample
		err := pool.QueryRow(ctx, b.sql(`SELECT (SELECT count(*) FROM /* schema */inbox WHERE consumer = 'history'),
		                                        (SELECT count(*) FROM /* schema */effects)`)).Scan(&s.historyLeft, &s.effects)
		if err != nil {
			t.Error(err)
			return
		}
		samples = append(samples, s)
	})
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */river_job WHERE kind = 'pgbox.prune' AND state = 'completed')")

	mu.Lock()
	defer mu.Unlock()
	require.EqualValues(t, 1000, largest, "no statement deleted more than a batch")
	require.Equal(t, history/1000+1, batches, "200 full batches and a short last one")
	require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE consumer = 'history'"))
	require.GreaterOrEqual(t, len(samples), 5)
	first, last := samples[0], samples[len(samples)-2] // both taken mid-prune
	require.Positive(t, last.historyLeft, "the later sample is still mid-prune")
	require.Less(t, last.historyLeft, first.historyLeft)
	require.Greater(t, last.effects, first.effects, "workers completed messages while the prune ran")
}

// A replay scheduled for a time already past is run by the maintenance
// job, once, and counted.
func TestScheduledReplaysRunFromTheMaintainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		SELECT 'payments', 'order-' || g, 'ChargeCard', 'dead', 3, 3, '\x00'::bytea, ''::bytea, 'gateway timeout', /* schema */inbox_bucket('order-' || g)
		FROM generate_series(1, 30) AS g`)
	adm, err := admin.New(pgtest.Pool(t), admin.Config{Schema: b.schema})
	require.NoError(t, err)
	r, err := adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{
		At:     time.Now().Add(-time.Second),
		Filter: admin.Filter{Consumer: "payments"},
		Note:   "gateway fixed",
	})
	require.NoError(t, err)

	reader := sdkmetric.NewManualReader()
	b.start(t, maintenance.Config{
		BatchSize:      7,
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		PruneInterval:  time.Hour,
		ReplayInterval: time.Second,
	})
	b.waitFor(t, "SELECT state = 'done' FROM /* schema */scheduled_replays WHERE id = $1", r.ID)
	require.EqualValues(t, 30, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE status = 'pending' AND replays = 1"))
	require.EqualValues(t, 30, b.count(t, "SELECT replayed FROM /* schema */scheduled_replays WHERE id = $1", r.ID))
	require.Equal(t, map[string]int64{"": 30}, telemetrytest.Sums(t, reader, "pgbox.maintenance.replayed", ""))
}

// Start refuses a schema whose River tables are missing, with the command
// that fixes it.
func TestStartRequiresRiversTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	migrator, err := rivermigrate.New(riverpgxv5.New(pgtest.Pool(t)), &rivermigrate.Config{Schema: b.schema})
	require.NoError(t, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1})
	require.NoError(t, err)

	m, err := maintenance.New(pgtest.Pool(t), maintenance.Config{Schema: b.schema})
	require.NoError(t, err)
	err = m.Start(ctx)
	require.ErrorIs(t, err, pgbox.ErrSchemaNotMigrated)
	require.ErrorContains(t, err, "River's tables in schema "+b.schema+" are missing or behind")
	require.ErrorContains(t, err, "run inboxctl migrate up")
	require.False(t, m.Running())
	require.NoError(t, m.Stop(ctx), "Stop after a failed Start is fine")
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	_, err := maintenance.New(nil, maintenance.Config{})
	require.ErrorContains(t, err, "pool is nil")
	_, err = maintenance.New(pool, maintenance.Config{
		BatchSize: -1, InboxRetention: -2 * time.Hour, PruneInterval: 10 * time.Millisecond, ReplayInterval: -2, Schema: "Mixed Case",
	})
	require.ErrorContains(t, err, "Config.BatchSize is -1")
	require.ErrorContains(t, err, "Config.InboxRetention is -2h0m0s")
	require.ErrorContains(t, err, "Config.PruneInterval is 10ms: it must be at least 1s")
	require.ErrorContains(t, err, "Config.ReplayInterval is -2ns")
	require.ErrorContains(t, err, `Config.Schema "Mixed Case" cannot hold River's client`)
}

// Stop before Start, twice, is fine; Start after Stop is refused.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	m, err := maintenance.New(pgtest.Pool(t), maintenance.Config{Schema: b.schema})
	require.NoError(t, err)
	require.NoError(t, m.Stop(ctx))
	require.NoError(t, m.Stop(ctx))
	<-m.Stopped()
	require.ErrorContains(t, m.Start(ctx), "Start after Stop")

	m = b.start(t, maintenance.Config{PruneInterval: time.Hour, ReplayInterval: -1})
	require.True(t, m.Running())
	require.ErrorContains(t, m.Start(ctx), "already started")
}

// A throttled replay is paced by the maintenance job: each run replays at
// most what the rate allowed over one interval (and the run's own length),
// judged by the times River recorded, and every message is replayed once.
func TestThrottledReplayFromTheMaintainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		SELECT 'payments', 'order-' || g, 'ChargeCard', 'dead', 3, 3, '\x00'::bytea, ''::bytea, 'gateway timeout', /* schema */inbox_bucket('order-' || g)
		FROM generate_series(1, 25) AS g`)
	adm, err := admin.New(pgtest.Pool(t), admin.Config{Schema: b.schema})
	require.NoError(t, err)
	r, err := adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{Rate: 10, Filter: admin.Filter{Consumer: "payments"}})
	require.NoError(t, err)

	b.start(t, maintenance.Config{PruneInterval: time.Hour, ReplayInterval: time.Second})
	b.waitFor(t, "SELECT state = 'done' FROM /* schema */scheduled_replays WHERE id = $1", r.ID)
	require.EqualValues(t, 25, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE status = 'pending' AND replays = 1"))

	const runs = `FROM /* schema */river_job
		WHERE kind = 'pgbox.scheduled_replays' AND state = 'completed' AND (metadata->'output'->>'replayed')::bigint > 0`
	// River records a run as completed a moment after its last batch commits.
	b.waitFor(t, "SELECT coalesce(sum((metadata->'output'->>'replayed')::bigint), 0) = 25 "+runs)
	require.GreaterOrEqual(t, b.count(t, "SELECT count(*) "+runs), int64(2), "25 messages at 10/s take several runs")
	require.Zero(t, b.count(t, "SELECT count(*) "+runs+`
		AND (metadata->'output'->>'replayed')::bigint > 10 * (1 + extract(epoch FROM finalized_at - attempted_at)) + 1`),
		"no run replayed more than one interval's worth of the rate")
}
