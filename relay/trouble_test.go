package relay_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/internal/telemetry"
	"github.com/pgbox/pgbox/internal/telemetry/telemetrytest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// bouncerPool opens a pool through the PgBouncer of PGBOUNCER_URL
// (transaction pooling), or skips the test when it is unset.
func bouncerPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	u := os.Getenv("PGBOUNCER_URL")
	if u == "" {
		t.Skip("PGBOUNCER_URL is unset: point it at a transaction-pooling PgBouncer in front of the test database (scripts/pgbouncer.sh) to run this test")
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	cfg, err := pgxpool.ParseConfig(u + sep + "default_query_exec_mode=exec")
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func startOn(t *testing.T, pool *pgxpool.Pool, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

func checkHealth(t *testing.T, pool *pgxpool.Pool, schema string, r *relay.Relay) (int, map[string]health.CheckResult) {
	t.Helper()
	c, err := health.New(pool, health.Config{BacklogAgeMax: -1, Relays: []*relay.Relay{r}, Schema: schema})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	rep := c.Check(context.Background())
	out := map[string]health.CheckResult{}
	for _, ch := range rep.Checks {
		out[ch.Name] = ch
	}
	return rec.Code, out
}

// A relay whose pool goes through a transaction-pooling PgBouncer, and
// which listens through it too, finds by its self-check that
// notifications do not arrive: it warns once, the health check and the
// gauge show it, and it goes on publishing by polling.
func TestListenThroughTransactionPoolerIsReported(t *testing.T) {
	t.Parallel()
	pgtest.ListensThroughPooler(t)
	bouncer := bouncerPool(t)
	b := setup(t) // the schema is made through the direct pool
	logs := &logtest.Recorder{}
	reader := sdkmetric.NewManualReader()
	pub := &recorder{}
	r := startOn(t, bouncer, relay.Config{
		Logger:        slog.New(logs),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		PollInterval:  50 * time.Millisecond,
		Publisher:     pub,
		Schema:        b.schema,
	})

	require.Eventually(t, func() bool { return r.NotifyErr() != nil }, time.Minute, 10*time.Millisecond)
	require.ErrorContains(t, r.NotifyErr(), "ListenConnConfig")
	require.ErrorContains(t, r.NotifyErr(), "PollOnly")
	require.Equal(t, 1, logs.Count(slog.LevelWarn, "notifications do not arrive"))
	require.Equal(t, map[string]int64{"relay": 0}, telemetrytest.Gauges(t, reader, telemetry.NotificationsArriving, string(telemetry.AttrComponent)))

	code, checks := checkHealth(t, b.pool, b.schema, r)
	require.Equal(t, http.StatusOK, code, "a warning costs latency, not correctness")
	require.Equal(t, health.StatusWarn, checks["notifications relay"].Status)
	require.Contains(t, checks["notifications relay"].Error, "did not come back")

	ids := b.write(t, outbox.Message{Topic: "t", EventType: "E", Payload: []byte("{}")})
	require.Eventually(t, func() bool { return len(pub.published()) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, strs(ids), pub.published())
}

// The same relay behind the same PgBouncer, given a direct connection to
// LISTEN on, is woken by notifications: with an hour's poll interval, only
// a notification can get a new row published.
func TestDirectListenConnectionBehindAPooler(t *testing.T) {
	t.Parallel()
	bouncer := bouncerPool(t)
	b := setup(t)
	listen, err := pgx.ParseConfig(pgtest.DirectURL(t))
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	pub := &recorder{}
	r := startOn(t, bouncer, relay.Config{
		ListenConnConfig: listen,
		MeterProvider:    sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		PollInterval:     time.Hour,
		Publisher:        pub,
		Schema:           b.schema,
	})
	require.Eventually(t, func() bool {
		return telemetrytest.Gauges(t, reader, telemetry.NotificationsArriving, string(telemetry.AttrComponent))["relay"] == 1
	}, time.Minute, 10*time.Millisecond)
	require.NoError(t, r.NotifyErr())

	ids := b.write(t, outbox.Message{Topic: "t", EventType: "E", Payload: []byte("{}")})
	require.Eventually(t, func() bool { return len(pub.published()) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, strs(ids), pub.published())
}

// A poll-only relay opens no LISTEN connection and publishes by polling.
func TestPollOnlyRelayDoesNotListen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	listening := func() (n int) {
		q := "SELECT count(*) FROM pg_stat_activity WHERE query = $1"
		require.NoError(t, b.pool.QueryRow(context.Background(), q, "LISTEN "+ident.Quote(ident.Channel(b.schema, "outbox"))).Scan(&n))
		return n
	}
	pub := &recorder{}
	b.start(t, relay.Config{PollOnly: true, Publisher: pub})
	ids := b.write(t, outbox.Message{Topic: "t", EventType: "E", Payload: []byte("{}")})
	require.Eventually(t, func() bool { return len(pub.published()) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, strs(ids), pub.published())
	require.Zero(t, listening())

	// The query does see a relay that listens.
	b.start(t, relay.Config{Publisher: &recorder{}})
	require.Eventually(t, func() bool { return listening() == 1 }, 30*time.Second, 10*time.Millisecond)

	_, err := relay.New(b.pool, relay.Config{PollOnly: true, ListenConnConfig: &pgx.ConnConfig{}, Publisher: pub})
	require.ErrorContains(t, err, "Config.PollOnly and Config.ListenConnConfig are both set")
}

// A relay that cannot record what it published stops claiming, says so
// once, fails the health check, and retries recording; once it can record
// again it resumes. Nothing is published twice meanwhile.
func TestRelayPausesWhileOutcomesCannotBeRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// The trigger counts its rejections in a sequence, which a rollback
	// does not undo. It is turned off by an update of a table of its own:
	// a DROP TRIGGER would wait for the relay's batch transaction, which
	// holds the outbox while it retries.
	for _, q := range []string{
		`CREATE SEQUENCE /* schema */rejections`,
		`CREATE TABLE /* schema */rejecting (on_ bool NOT NULL)`,
		`INSERT INTO /* schema */rejecting VALUES (true)`,
		`CREATE FUNCTION /* schema */reject_published() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT on_ FROM ` + b.schema + `.rejecting) THEN
				PERFORM nextval('` + b.schema + `.rejections');
				RAISE EXCEPTION 'test: publish outcomes rejected';
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER reject_published BEFORE UPDATE ON /* schema */outbox FOR EACH ROW
		WHEN (NEW.published_at IS NOT NULL AND OLD.published_at IS NULL) EXECUTE FUNCTION /* schema */reject_published()`,
	} {
		_, err := b.pool.Exec(ctx, b.sql(q))
		require.NoError(t, err)
	}
	rejections := func() (n int64) {
		require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM /* schema */rejections")).Scan(&n))
		return n
	}
	logs := &logtest.Recorder{}
	reader := sdkmetric.NewManualReader()
	pub := &recorder{}
	r := b.start(t, relay.Config{
		Logger:        slog.New(logs),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Publisher:     pub,
	})
	first := b.write(t, outbox.Message{Topic: "t", EventType: "E", Payload: []byte("1")})
	require.Eventually(t, func() bool { return r.RecordErr() != nil }, 30*time.Second, 10*time.Millisecond)
	require.ErrorContains(t, r.RecordErr(), "publish outcomes rejected")
	require.Equal(t, map[string]int64{"relay": 1}, telemetrytest.Gauges(t, reader, telemetry.ClaimingPaused, string(telemetry.AttrComponent)))
	code, checks := checkHealth(t, b.pool, b.schema, r)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, health.StatusFail, checks["relay"].Status)
	require.Contains(t, checks["relay"].Error, "claiming paused")

	// A second row, announced and due, waits: no worker starts a claim
	// while the relay retries recording (several tries, a poll interval
	// apart at least). The other worker's claim, if it was already under
	// way when the pause began, may take the row once: its outcome then
	// waits too. After that, nothing more is claimed.
	second := b.write(t, outbox.Message{Topic: "t", EventType: "E", Payload: []byte("2")})
	attempts := func() (n int) {
		require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT attempts FROM /* schema */outbox WHERE id = $1"), second[0]).Scan(&n))
		return n
	}
	seen := rejections()
	require.Eventually(t, func() bool { return rejections() >= seen+3 }, 30*time.Second, 10*time.Millisecond)
	paused := attempts()
	require.LessOrEqual(t, paused, 1, "claimed while paused")
	seen = rejections()
	require.Eventually(t, func() bool { return rejections() >= seen+3 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, paused, attempts(), "claimed again while paused")
	require.Subset(t, append(strs(first), strs(second)...), pub.published())
	require.Equal(t, strs(first), pub.published()[:1], "each row published once, in order")
	require.LessOrEqual(t, len(pub.published()), 2, "each row published once")
	require.Equal(t, 1, logs.Count(slog.LevelError, "cannot record publish outcomes"))

	_, err := b.pool.Exec(ctx, b.sql("UPDATE /* schema */rejecting SET on_ = false"))
	require.NoError(t, err)
	b.waitPublished(t)
	require.NoError(t, r.RecordErr())
	require.Equal(t, append(strs(first), strs(second)...), pub.published(), "each row published once")
	require.Equal(t, 1, logs.Count(slog.LevelError, "cannot record publish outcomes"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "recorded again; claiming resumed"))
	require.Equal(t, map[string]int64{"relay": 0}, telemetrytest.Gauges(t, reader, telemetry.ClaimingPaused, string(telemetry.AttrComponent)))
	code, _ = checkHealth(t, b.pool, b.schema, r)
	require.Equal(t, http.StatusOK, code)
}
