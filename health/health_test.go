package health_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
	"github.com/pgbox/pgbox/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// get serves one request through c and decodes the report.
func get(t *testing.T, c *health.Checker) (int, health.Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var rep health.Report
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rep))
	return rec.Code, rep
}

// byName indexes a report's checks.
func byName(rep health.Report) map[string]health.CheckResult {
	out := map[string]health.CheckResult{}
	for _, c := range rep.Checks {
		out[c.Name] = c
	}
	return out
}

type discard struct{}

func (discard) Publish(string, ...*message.Message) error { return nil }
func (discard) Close() error                              { return nil }

// A service whose components all run, with a young backlog, is healthy;
// stopping one makes it unhealthy, and the report says which.
func TestHealthyServiceThenAStoppedDispatcher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)

	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema})
	require.NoError(t, err)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Inbox:    in,
		Handlers: map[string]dispatcher.Handler{"T": dispatcher.InTx(func(context.Context, pgx.Tx, *dispatcher.Message) error { return nil })},
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	r, err := relay.New(pool, relay.Config{Publisher: discard{}, Schema: schema})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(ctx)) })
	m, err := maintenance.New(pool, maintenance.Config{PruneInterval: time.Hour, ReplayInterval: -1, Schema: schema})
	require.NoError(t, err)
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { require.NoError(t, m.Stop(ctx)) })

	c, err := health.New(pool, health.Config{
		Dispatchers: []*dispatcher.Dispatcher{d}, Maintainer: m, Relays: []*relay.Relay{r}, Schema: schema,
	})
	require.NoError(t, err)
	code, rep := get(t, c)
	require.Equal(t, http.StatusOK, code, "%+v", rep)
	require.Equal(t, health.StatusOK, rep.Status)
	names := []string{}
	for _, ch := range rep.Checks {
		names = append(names, ch.Name)
		require.Equal(t, health.StatusOK, ch.Status, ch.Name)
	}
	require.Equal(t, []string{"database", "schema", "dispatcher payments", "relay", "maintenance", "notifications payments", "notifications relay", "broker relay", "paused payments", "unavailable payments", "backlog payments", "outbox"}, names)
	require.Equal(t, fmt.Sprint("version ", pgbox.SchemaVersion), byName(rep)["schema"].Detail)
	require.Equal(t, "0 pending, the oldest due for 0s", byName(rep)["backlog payments"].Detail)

	require.NoError(t, d.Stop(ctx))
	code, rep = get(t, c)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, health.StatusFail, rep.Status)
	require.Equal(t, "not running", byName(rep)["dispatcher payments"].Error)
	require.Equal(t, health.StatusOK, byName(rep)["relay"].Status)

	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/healthz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Empty(t, rec.Body.Bytes())
}

// A claimable message that has waited longer than BacklogAgeMax fails the
// check while it waits, and the check passes again once it is handled.
func TestOldBacklogIsUnhealthy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)

	// One worker, one message at a time: the first message's handler holds
	// the worker until released, while a second, due an hour ago, waits.
	started, release := make(chan struct{}), make(chan struct{})
	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema})
	require.NoError(t, err)
	d, err := dispatcher.New(pool, dispatcher.Config{
		BatchSize: 1, Inbox: in, Workers: 1, PollInterval: 10 * time.Millisecond,
		Handlers: map[string]dispatcher.Handler{
			"Slow": dispatcher.Leased(func(ctx context.Context, _ *dispatcher.Message) error {
				close(started)
				<-release
				return nil
			}),
			"Fast": dispatcher.InTx(func(context.Context, pgx.Tx, *dispatcher.Message) error { return nil }),
		},
	})
	require.NoError(t, err)
	_, err = in.Receive(ctx, inbox.Message{ID: "slow", EventType: "Slow"})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(ctx)) })
	<-started
	_, err = in.Receive(ctx, inbox.Message{ID: "waiting", EventType: "Fast"})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ident.Render("UPDATE /* schema */inbox SET available_at = now() - interval '1 hour' WHERE message_id = 'waiting'", schema))
	require.NoError(t, err)

	c, err := health.New(pool, health.Config{BacklogAgeMax: time.Minute, Dispatchers: []*dispatcher.Dispatcher{d}, Schema: schema})
	require.NoError(t, err)
	rep := c.Check(ctx)
	require.False(t, rep.Healthy())
	require.Regexp(t, `^1 pending, the oldest due for 1h0m\S* over the 1m0s allowed$`, byName(*rep)["backlog payments"].Error)
	require.Equal(t, health.StatusOK, byName(*rep)["dispatcher payments"].Status)

	close(release)
	require.Eventually(t, func() bool { return c.Check(ctx).Healthy() }, time.Minute, 10*time.Millisecond)
}

func TestUnreachableDatabaseAndUnmigratedSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/pgbox?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	dead, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer dead.Close()
	c, err := health.New(dead, health.Config{Relays: nil})
	require.NoError(t, err)
	code, rep := get(t, c)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, health.StatusFail, byName(rep)["database"].Status)
	require.Equal(t, "database unreachable", byName(rep)["schema"].Error)

	c, err = health.New(pgtest.Pool(t), health.Config{Schema: pgtest.EmptySchema(t)})
	require.NoError(t, err)
	code, rep = get(t, c)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, health.StatusOK, byName(rep)["database"].Status)
	require.Contains(t, byName(rep)["schema"].Error, "run inboxctl migrate up")
}

// A schema that has lost the inbox's row of its partitioning table cannot
// receive a message: the health check fails and says what to restore.
func TestDamagedSchemaIsUnhealthy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	c, err := health.New(pool, health.Config{Schema: schema, BacklogAgeMax: -1})
	require.NoError(t, err)
	code, _ := get(t, c)
	require.Equal(t, http.StatusOK, code)

	_, err = pool.Exec(ctx, ident.Render("DELETE FROM /* schema */partitioning WHERE table_name = 'inbox'", schema))
	require.NoError(t, err)
	code, rep := get(t, c)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, health.StatusFail, byName(rep)["schema"].Status)
	require.Contains(t, byName(rep)["schema"].Error, "partitioning has no row for the inbox (no message can be received)")
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := health.New(nil, health.Config{})
	require.ErrorContains(t, err, "pool is nil")
	_, err = health.New(pgtest.Pool(t), health.Config{BacklogAgeMax: -5})
	require.ErrorContains(t, err, "Config.BacklogAgeMax is -5ns")
	_, err = health.New(pgtest.Pool(t), health.Config{Dispatchers: []*dispatcher.Dispatcher{nil}})
	require.ErrorContains(t, err, "Config.Dispatchers[0] is nil")
}
