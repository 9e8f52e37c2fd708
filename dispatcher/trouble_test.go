package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// A dispatcher whose leased outcomes cannot be recorded stops claiming,
// says so once, fails the health check, and retries; once it can record
// again it resumes. No handler runs twice meanwhile.
func TestDispatcherPausesWhileOutcomesCannotBeRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The trigger counts its rejections in a sequence, which a rollback
	// does not undo.
	b.exec(t, `CREATE SEQUENCE /* schema */rejections`)
	b.exec(t, `CREATE FUNCTION /* schema */reject_done() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM nextval('`+b.schema+`.rejections');
			RAISE EXCEPTION 'test: outcomes rejected';
		END $$`)
	b.exec(t, `CREATE TRIGGER reject_done BEFORE UPDATE ON /* schema */inbox FOR EACH ROW
		WHEN (NEW.status = 'done') EXECUTE FUNCTION /* schema */reject_done()`)
	rejections := func() (n int64) {
		b.scalar(t, &n, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM /* schema */rejections")
		return n
	}
	var (
		mu    sync.Mutex
		calls = map[string]int{}
	)
	logs := &logtest.Recorder{}
	d := b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.Leased(func(_ context.Context, m *dispatcher.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls[m.ID]++
			return nil
		})},
		Logger: slog.New(logs),
	})
	checker, err := health.New(b.pool, health.Config{BacklogAgeMax: -1, Dispatchers: []*dispatcher.Dispatcher{d}, Schema: b.schema})
	require.NoError(t, err)
	status := func() int {
		rec := httptest.NewRecorder()
		checker.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code
	}

	b.receive(t, "a")
	require.Eventually(t, func() bool { return d.RecordErr() != nil }, 30*time.Second, 10*time.Millisecond)
	require.ErrorContains(t, d.RecordErr(), "outcomes rejected")
	require.Equal(t, http.StatusServiceUnavailable, status())

	// A second message, announced and due, waits: no worker starts a claim
	// while the dispatcher retries recording. Another worker's claim, if it
	// was already under way when the pause began, may take it once; after
	// that, nothing more is claimed.
	b.receive(t, "b")
	seen := rejections()
	require.Eventually(t, func() bool { return rejections() >= seen+3 }, 30*time.Second, 10*time.Millisecond)
	paused := b.row(t, "b").Attempts
	require.LessOrEqual(t, paused, 1, "claimed while paused")
	seen = rejections()
	require.Eventually(t, func() bool { return rejections() >= seen+3 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, paused, b.row(t, "b").Attempts, "claimed again while paused")
	require.Equal(t, 1, logs.Count(slog.LevelError, "cannot record handler outcomes"))

	b.exec(t, "DROP TRIGGER reject_done ON /* schema */inbox")
	b.waitSettled(t)
	require.NoError(t, d.RecordErr())
	require.Equal(t, "done", b.row(t, "a").Status)
	require.Equal(t, "done", b.row(t, "b").Status)
	mu.Lock()
	require.Equal(t, map[string]int{"a": 1, "b": 1}, calls, "each handler ran once")
	mu.Unlock()
	require.Equal(t, 1, logs.Count(slog.LevelError, "cannot record handler outcomes"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "recorded again; claiming resumed"))
	require.Equal(t, http.StatusOK, status())
}

// ListenConnConfig is the connection the dispatcher LISTENs on: here a
// role of the test's own, which the server shows, and whose self-check
// passes. PollOnly opens no LISTEN at all.
func TestListenConnConfigAndPollOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	role := fmt.Sprintf("pgbox_listen_%d", time.Now().UnixNano())
	b.exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		// After the dispatcher's own cleanup (LIFO): its connection is closed.
		_, err := pgtest.Pool(t).Exec(context.Background(), "DROP ROLE "+role)
		require.NoError(t, err)
	})
	listen, err := pgx.ParseConfig(pgtest.DirectURL(t))
	require.NoError(t, err)
	listen.User = role
	handlers := map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)}
	d := b.start(t, dispatcher.Config{Handlers: handlers, ListenConnConfig: listen, PollInterval: time.Hour})
	listeners := func(user string) (n int) {
		b.scalar(t, &n, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND query = $2",
			user, `LISTEN "`+b.inbox.Channel()+`"`)
		return n
	}
	require.Eventually(t, func() bool { return listeners(role) == 1 }, 30*time.Second, 10*time.Millisecond)
	// Only a notification can start a message within an hour's poll.
	b.receive(t, "a")
	b.waitSettled(t)
	require.NoError(t, d.NotifyErr())

	// A poll-only dispatcher adds no listener.
	var before int
	b.scalar(t, &before, "SELECT count(*) FROM pg_stat_activity WHERE query = $1", `LISTEN "`+b.inbox.Channel()+`"`)
	_, err = dispatcher.New(b.pool, b.config(t, dispatcher.Config{Handlers: handlers, ListenConnConfig: listen, PollOnly: true}))
	require.ErrorContains(t, err, "Config.PollOnly and Config.ListenConnConfig are both set")
	b.start(t, dispatcher.Config{Handlers: handlers, PollOnly: true})
	b.receive(t, "b")
	b.waitSettled(t)
	var after int
	b.scalar(t, &after, "SELECT count(*) FROM pg_stat_activity WHERE query = $1", `LISTEN "`+b.inbox.Channel()+`"`)
	require.Equal(t, before, after)
}
