package maintenance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/internal/telemetry/telemetrytest"
	"github.com/pgbox/pgbox/maintenance"
)

// A retention run drops the expired partitions (a day's, a generation's)
// whole, and deletes in batches what no partition's drop takes: done
// messages and published rows past their window in the default partitions
// and the outbox's undated one, conflict records, expired idempotency keys,
// and the rows of processes long gone. It never deletes dead, discarded,
// pending or running messages, nor dead or unpublished outbox rows: those
// of a dropped partition move to where their bucket now goes. The run
// records what it did, and counts the deleted rows in a metric.
func TestRetentionDeletesOnlyWhatItShould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pool := pgtest.Pool(t)
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	today := partition.DayOf(now)
	old := today - 9
	require.NoError(t, partition.CreateDay(ctx, pool, b.schema, partition.Inbox, old, time.Second))
	require.NoError(t, partition.CreateDay(ctx, pool, b.schema, partition.Outbox, old, time.Second))
	at := func(d partition.Day, k int) string {
		return partition.IDAt(d.Time().Add(time.Duration(k) * time.Millisecond)).String()
	}

	// The expired day: 2,500 done messages and one of each unfinished
	// status; yesterday (no partition: the default one), one done 8 days
	// ago and one done a day ago.
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
		SELECT 'a', m.id, 'T', m.status, 1, 3, '\x00'::bytea, ''::bytea,
		       CASE WHEN m.status = 'done' THEN now() - m.days * interval '1 day' END, /* schema */inbox_bucket(m.id)
		FROM unnest($1::text[], $2::text[], $3::int[]) AS m(id, status, days)`,
		append(idsOf(2500, func(k int) string { return at(old, k) }), at(old, 3000), at(old, 3001), at(old, 3002), at(old, 3003),
			at(today-1, 1), at(today-1, 2)),
		append(repeat("done", 2500), "dead", "discarded", "pending", "running", "done", "done"),
		append(repeat(int32(8), 2500), 0, 0, 0, 0, 8, 1))
	b.exec(t, `
		INSERT INTO /* schema */inbox_conflicts (consumer, message_id, received_at, payload_hash, payload)
		VALUES ('a', 'x', now() - interval '8 days', '\x00', ''), ('a', 'y', now() - interval '8 days', '\x00', ''),
		       ('a', 'z', now() - interval '8 days', '\x00', ''), ('a', 'x', now(), '\x00', '')`)
	// The outbox: the expired day's 1,200 published rows, and a dead and a
	// pending one; an id of the producer's (no UUIDv7, so undated)
	// published 8 days ago and one published a day ago.
	b.exec(t, `
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, published_at, bucket)
		SELECT r.id, r.topic, 'T', '', r.status, CASE WHEN r.status = 'published' THEN now() - r.days * interval '1 day' END,
		       /* schema */outbox_bucket(r.id)
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[]) AS r(id, topic, status, days)`,
		append(idsOf(1200, func(k int) string { return at(old, k) }), at(old, 2000), at(old, 2001), uuid.NewString(), uuid.NewString()),
		append(repeat("old", 1200), "dead", "pending", "undated-old", "recent"),
		append(repeat("published", 1200), "dead", "pending", "published", "published"),
		append(repeat(int32(8), 1200), 0, 0, 8, 1))
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
		PruneInterval:  pruneOnStartOnly,
		ReplayInterval: -1,
	})
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */river_job WHERE kind = 'pgbox.prune' AND state = 'completed')")

	rows, err := pool.Query(ctx, b.sql("SELECT status FROM /* schema */inbox ORDER BY 1"))
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"dead", "discarded", "done", "pending", "running"}, left, "the done one is a day old")
	require.EqualValues(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox_conflicts"))
	rows, err = pool.Query(ctx, b.sql("SELECT topic FROM /* schema */outbox ORDER BY 1"))
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"dead", "pending", "recent"}, left)
	rows, err = pool.Query(ctx, b.sql("SELECT key FROM /* schema */idempotency_keys ORDER BY 1"))
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"fresh", "leased"}, left)
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */processes WHERE name = 'gone-long-ago'"))
	require.EqualValues(t, 1, b.count(t, "SELECT count(*) FROM /* schema */processes WHERE name = 'gone-lately'"))

	// The run recorded what it did: the two expired partitions dropped,
	// the 4 + 2 unfinished rows moved out of them, and a statement of at
	// most 1000 rows for each of the other tables (the inbox's and the
	// outbox's default partitions, the outbox's undated rows, conflicts,
	// idempotency keys, processes).
	jobs := b.completedJobs(t, "pgbox.prune")
	require.Len(t, jobs, 1)
	var out struct {
		Deleted    map[string]int64 `json:"deleted"`
		Partial    bool             `json:"partial"`
		Partitions partition.Report `json:"partitions"`
		Statements int              `json:"statements"`
	}
	require.NoError(t, json.Unmarshal(jobs[0].Output, &out))
	deleted := map[string]int64{
		"inbox_default": 1, "inbox_conflicts": 3, "outbox_undated": 1, "outbox_default": 0, "idempotency_keys": 2, "processes": 1,
	}
	require.Equal(t, deleted, out.Deleted)
	require.ElementsMatch(t, []string{"inbox_d" + old.String(), "outbox_d" + old.String()}, out.Partitions.Dropped)
	require.EqualValues(t, 6, out.Partitions.Kept)
	require.Equal(t, 6, out.Statements)
	require.False(t, out.Partial)
	require.Equal(t, m.ID(), jobs[0].EnqueuedBy)
	delete(deleted, "outbox_default") // nothing deleted, nothing counted
	require.Equal(t, deleted, telemetrytest.Sums(t, reader, "pgbox.maintenance.deleted", "pgbox.table"))
	require.EqualValues(t, 2, telemetrytest.Sums(t, reader, "pgbox.maintenance.partitions", "pgbox.change")["dropped"])
}

// An expired day whose partition holds more dead messages than a drop may
// move (no one replayed or discarded them) is kept, and its expired done
// messages are deleted row by row meanwhile, as before partitions: a
// burst of poison never suspends retention.
func TestACrowdedPartitionIsPrunedRowByRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pool := pgtest.Pool(t)
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	old := partition.DayOf(now) - 9
	require.NoError(t, partition.CreateDay(ctx, pool, b.schema, partition.Inbox, old, time.Second))
	const dead, done = 10_001, 300
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
		SELECT 'a', m, 'T', CASE WHEN g <= $2 THEN 'dead' ELSE 'done' END, 1, 3, '\x00'::bytea, ''::bytea,
		       CASE WHEN g > $2 THEN now() - interval '8 days' END, /* schema */inbox_bucket(m)
		FROM unnest($1::text[]) WITH ORDINALITY AS x(m, g)`,
		idsOf(dead+done, func(k int) string {
			return partition.IDAt(old.Time().Add(time.Duration(k) * time.Millisecond)).String()
		}), dead)

	b.start(t, maintenance.Config{BatchSize: 1000, PruneInterval: pruneOnStartOnly, ReplayInterval: -1})
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */river_job WHERE kind = 'pgbox.prune' AND state = 'completed')")

	name := "inbox_d" + old.String()
	require.EqualValues(t, dead, b.count(t, "SELECT count(*) FROM /* schema */"+name+" WHERE status = 'dead'"))
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */"+name+" WHERE status = 'done'"))
	jobs := b.completedJobs(t, "pgbox.prune")
	require.Len(t, jobs, 1)
	var out struct {
		Deleted    map[string]int64 `json:"deleted"`
		Partitions partition.Report `json:"partitions"`
	}
	require.NoError(t, json.Unmarshal(jobs[0].Output, &out))
	require.Equal(t, []string{name}, out.Partitions.Crowded)
	require.Empty(t, out.Partitions.Dropped)
	require.EqualValues(t, done, out.Deleted[name])
}

// pruneOnStartOnly is the PruneInterval of the tests that read the one
// retention run a leader makes at once. Runs are aligned to the clock: with
// an hour, a test that starts a moment before the hour strikes gets a
// second run on the hour (TestDroppingADayOfMessagesWhileWorkersRun, which
// read one run, got two: at 11:59:59.7 and at 12:00:00). A hundred years'
// interval next ends in August 2099.
const pruneOnStartOnly = 100 * 365 * 24 * time.Hour

// idsOf returns n ids made by id.
func idsOf(n int, id func(int) string) []string {
	out := make([]string, n)
	for k := range out {
		out[k] = id(k)
	}
	return out
}

// repeat returns n copies of v.
func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// A day of 200,000 done messages past the window goes in one DROP TABLE
// while a dispatcher works: the run deletes none of them row by row, and
// every message received meanwhile is handled once.
func TestDroppingADayOfMessagesWhileWorkersRun(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("inserts 200,000 rows")
	}
	ctx := context.Background()
	b := setup(t)
	pool := pgtest.Pool(t)
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	old := partition.DayOf(now) - 30
	require.NoError(t, partition.CreateDay(ctx, pool, b.schema, partition.Inbox, old, time.Second))
	const history = 200_000
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
		SELECT 'history', m.id, 'Old', 'done', 1, 3, '\x00'::bytea, ''::bytea, now() - interval '29 days', $2
		FROM (SELECT `+partition.IDSQL("$1::bigint + g", "g")+` AS id FROM generate_series(1, $3::int) AS g) AS m`,
		old.Time().UnixMilli(), int32(old), history)
	b.exec(t, "CREATE TABLE /* schema */effects (id text PRIMARY KEY)")

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
	var sent int
	producer.Go(func() {
		for ; ; sent++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if _, err := live.Receive(ctx, inbox.Message{ID: fmt.Sprintf("live-%d", sent), EventType: "Live"}); err != nil {
				t.Error(err)
				return
			}
		}
	})

	b.start(t, maintenance.Config{BatchSize: 1000, PruneInterval: pruneOnStartOnly, ReplayInterval: -1})
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */river_job WHERE kind = 'pgbox.prune' AND state = 'completed')")
	close(stop)
	producer.Wait()

	jobs := b.completedJobs(t, "pgbox.prune")
	require.Len(t, jobs, 1)
	var out struct {
		Deleted    map[string]int64 `json:"deleted"`
		Partitions partition.Report `json:"partitions"`
	}
	require.NoError(t, json.Unmarshal(jobs[0].Output, &out))
	require.Equal(t, []string{"inbox_d" + old.String()}, out.Partitions.Dropped)
	require.Zero(t, out.Deleted["inbox_default"], "none deleted row by row")
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE consumer = 'history'"))
	b.waitFor(t, "SELECT count(*) = $1 FROM /* schema */effects", sent)
	require.EqualValues(t, sent, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE consumer = 'live' AND status = 'done'"))
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
	// The job counts what it replayed once RunDueReplays has returned, after
	// its last batch committed: the count may lag the row by a moment.
	require.Eventually(t, func() bool {
		return telemetrytest.Sums(t, reader, "pgbox.maintenance.replayed", "")[""] >= 30
	}, 30*time.Second, time.Millisecond)
	require.Equal(t, map[string]int64{"": 30}, telemetrytest.Sums(t, reader, "pgbox.maintenance.replayed", ""), "counted once")
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
