package liveness_test

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/liveness"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const heartbeat = 100 * time.Millisecond

// row is a process's row as stored.
type row struct {
	consumer, host, kind, name, version string
	heartbeatMS                         int64
	lastSeen, started                   time.Time
	pid                                 int
}

func readRow(t *testing.T, schema string, id int64) (row, bool) {
	t.Helper()
	var r row
	var consumer *string
	err := pgtest.Pool(t).QueryRow(context.Background(), ident.Render(`
		SELECT kind, consumer, name, host, pid, version, heartbeat_ms, started_at, last_seen_at
		FROM /* schema */processes WHERE id = $1`, schema), id).
		Scan(&r.kind, &consumer, &r.name, &r.host, &r.pid, &r.version, &r.heartbeatMS, &r.started, &r.lastSeen)
	if err == pgx.ErrNoRows {
		return r, false
	}
	require.NoError(t, err)
	if consumer != nil {
		r.consumer = *consumer
	}
	return r, true
}

// waitUntil polls cond until it holds, or fails the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func start(t *testing.T, db liveness.DB, cfg liveness.Config) *liveness.Process {
	t.Helper()
	p := liveness.New(db, cfg)
	p.Start(context.Background())
	t.Cleanup(func() { p.Stop(context.Background()) })
	return p
}

// A process registers when it starts, touches its row every heartbeat,
// tags its claim tokens with its id, and deletes its row when it stops;
// in the suite's query mode (through a pooler too) and in each of those
// that send parameters untyped.
func TestRegisterBeatStop(t *testing.T) {
	t.Parallel()
	for name, newPool := range pgtest.PoolsByMode() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			schema := pgtest.Schema(t)
			pool := newPool(t)
			p := start(t, pool, liveness.Config{Consumer: "payments", Heartbeat: heartbeat, Kind: pgbox.ProcessDispatcher, Schema: schema})

			id := p.ID()
			require.Positive(t, id, "registered by Start")
			r, ok := readRow(t, schema, id)
			require.True(t, ok)
			host, err := os.Hostname()
			require.NoError(t, err)
			require.Equal(t, row{
				consumer: "payments", host: host, kind: "dispatcher", name: host + ":" + strconv.Itoa(os.Getpid()),
				version: liveness.Version(), heartbeatMS: heartbeat.Milliseconds(), pid: os.Getpid(),
				lastSeen: r.lastSeen, started: r.started,
			}, r)
			require.Equal(t, "(devel)", r.version, "a test binary is pgbox built from its checkout")

			waitUntil(t, "a heartbeat touches the row", func() bool {
				now, ok := readRow(t, schema, id)
				return ok && now.lastSeen.After(r.lastSeen)
			})

			first, second := p.Token(), p.Token()
			require.Equal(t, id, first>>32)
			require.Equal(t, id, second>>32)
			require.NotEqual(t, first, second)

			p.Stop(context.Background())
			_, ok = readRow(t, schema, id)
			require.False(t, ok, "a clean stop deletes the row")
			p.Stop(context.Background()) // twice is fine
		})
	}
}

// A row deleted under a live process (pruned after a long pause, or by
// hand) comes back at the next heartbeat, with the same id and start.
func TestHeartbeatWritesTheRowBack(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	p := start(t, pgtest.Pool(t), liveness.Config{Heartbeat: heartbeat, Kind: pgbox.ProcessRelay, Name: "relay-1", Schema: schema})
	before, ok := readRow(t, schema, p.ID())
	require.True(t, ok)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render("DELETE FROM /* schema */processes", schema))
	require.NoError(t, err)

	waitUntil(t, "the row is back", func() bool { _, ok := readRow(t, schema, p.ID()); return ok })
	after, _ := readRow(t, schema, p.ID())
	require.Equal(t, "relay-1", after.name)
	require.Empty(t, after.consumer)
	require.True(t, before.started.Equal(after.started), "the start time is kept")
}

// When the table cannot be written, Start still returns, tokens belong to
// no process, and the trouble is logged once, however many heartbeats
// fail; once the table is back, the process registers and says so once.
func TestFailingRegistrationIsLoggedOnceAndRetried(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	exec := func(q string) {
		_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(q, schema))
		require.NoError(t, err)
	}
	exec("ALTER TABLE /* schema */processes RENAME TO processes_away")
	var logs logtest.Recorder
	db := &countingDB{DB: pgtest.Pool(t)}
	p := start(t, db, liveness.Config{Heartbeat: heartbeat, Kind: pgbox.ProcessMaintainer,
		Logger: slog.New(&logs), RiverID: func() string { return "river-1" }, Schema: schema})

	require.Zero(t, p.ID())
	require.Negative(t, p.Token(), "an unregistered process's tokens are nobody's")
	const failing = "cannot record in the processes table"
	require.Equal(t, 1, logs.Count(slog.LevelWarn, failing))
	waitUntil(t, "three more heartbeats have failed", func() bool { return db.calls.Load() >= 4 })
	require.Equal(t, 1, logs.Count(slog.LevelWarn, failing))

	exec("ALTER TABLE /* schema */processes_away RENAME TO processes")
	waitUntil(t, "the process registers", func() bool { return p.ID() != 0 })
	var riverID string
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		ident.Render("SELECT river_id FROM /* schema */processes WHERE id = $1", schema), p.ID()).Scan(&riverID))
	require.Equal(t, "river-1", riverID)
	waitUntil(t, "the recovery is logged", func() bool { return logs.Count(slog.LevelInfo, "recorded in the processes table again") == 1 })
	require.Equal(t, 1, logs.Count(slog.LevelWarn, failing))
}

// Stop before Start does nothing, and a Start after Stop registers nothing.
func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	p := liveness.New(pgtest.Pool(t), liveness.Config{Kind: pgbox.ProcessRelay, Schema: schema})
	p.Stop(context.Background())
	p.Start(context.Background())
	require.Zero(t, p.ID())
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		ident.Render("SELECT count(*) FROM /* schema */processes", schema)).Scan(&n))
	require.Zero(t, n)
}

// countingDB passes statements on to the database, counting them.
type countingDB struct {
	liveness.DB
	calls atomic.Int32
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.calls.Add(1)
	return c.DB.Exec(ctx, sql, args...)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.calls.Add(1)
	return c.DB.QueryRow(ctx, sql, args...)
}
