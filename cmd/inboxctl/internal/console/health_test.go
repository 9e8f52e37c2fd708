package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
)

// The overview names the maintenance leader as inboxctl processes does:
// by the process name the service gave it, its host and pid, not River's
// client id.
func TestOverviewNamesTheLeaderAsTheCLIDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{})
	m, err := maintenance.New(pgtest.Pool(t), maintenance.Config{Schema: b.schema, ID: "river-client-7d1c", ProcessName: "maint-eu-1",
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { require.NoError(t, m.Stop(ctx)) })
	require.Eventually(t, func() bool {
		ps, err := b.adm.Processes(ctx)
		require.NoError(t, err)
		return ps.Leader != nil && ps.Leader.ProcessID != 0
	}, 30*time.Second, 20*time.Millisecond, "no maintenance leader elected")

	host, err := os.Hostname()
	require.NoError(t, err)
	status, body := b.get(t, "/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, fmt.Sprintf("Maintenance leader: maint-eu-1 (host %s, pid %d), since", host, os.Getpid()))
	require.NotContains(t, body, "river-client-7d1c")
}

// With PostgreSQL down, a page says so in words (what is wrong, what to
// check), keeps the driver's own error for the details, answers 503, and
// refreshes itself, so that it shows the page asked for as soon as the
// database is back. The other targets are not affected; an action that
// failed is not posted again.
func TestDatabaseDownSaysWhatToCheckAndRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().(*net.TCPAddr)
	require.NoError(t, ln.Close()) // nothing listens there now
	cfg, err := pgxpool.ParseConfig(fmt.Sprintf("postgres://ops:hunter2@%s/orders?connect_timeout=5", addr))
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	down, err := admin.New(pool, admin.Config{})
	require.NoError(t, err)
	b := setup(t, Config{Targets: []Target{{Admin: down, Name: "down"}}, Redact: func(s string) string { return redactPassword.Replace(s) }})

	for _, path := range []string{"/?db=down", "/failures?db=down", "/message?db=down&consumer=payments&id=order-1"} {
		r, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
		require.NoError(t, err)
		resp, body := do(t, r)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", path, body)
		require.Equal(t, "5", resp.Header.Get("Retry-After"), path)
		require.Contains(t, body, `<meta http-equiv="refresh" content="5">`, path)
		require.Contains(t, body, "<h1>Database unreachable</h1>", path)
		require.Contains(t, body, fmt.Sprintf("Cannot connect to PostgreSQL at 127.0.0.1 port %d: the connection was refused", addr.Port), path)
		require.Contains(t, body, fmt.Sprintf("Is PostgreSQL running, on that host and port? (pg_isready -h 127.0.0.1 -p %d", addr.Port), path)
		require.Contains(t, body, "This page tries again every 5 s", path)
		require.Contains(t, body, "<summary>The driver's error</summary>", path)
		require.Contains(t, body, "connection refused", path)
		require.Contains(t, body, "This came from target <strong>down</strong>", path)
		require.NotContains(t, body, "hunter2", path)
	}
	status, _ := b.get(t, "/")
	require.Equal(t, http.StatusOK, status, "the other target is not affected")
	resp, body := b.post(t, "/replay", url.Values{"db": {"down"}, "scope": {"all"}, "consumer": {"payments"}})
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Contains(t, body, "Database unreachable")
	require.NotContains(t, body, `http-equiv="refresh"`, "an action is not posted again by itself")
	require.NotContains(t, b.logs.String(), "hunter2")

	// A connection lost under a statement (the server shut down, a
	// failover) reads the same way.
	for _, err := range []error{
		fmt.Errorf("stats: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}),
		fmt.Errorf("list: failed to receive message: %w", io.ErrUnexpectedEOF),
		fmt.Errorf("count: %w", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}),
	} {
		w := httptest.NewRecorder()
		b.console.fail(w, httptest.NewRequest(http.MethodGet, "/failures", nil), &b.console.cfg.Targets[0], err)
		require.Equal(t, http.StatusServiceUnavailable, w.Code, err.Error())
		require.Contains(t, w.Body.String(), "The connection to PostgreSQL was lost", err.Error())
		require.Contains(t, w.Body.String(), `<meta http-equiv="refresh" content="5">`, err.Error())
	}
}
