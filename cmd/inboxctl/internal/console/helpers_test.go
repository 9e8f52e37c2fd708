package console

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// hostilePayload and hostileError are what an attacker who can publish a
// message (or make a handler fail with their text) would try.
const (
	hostilePayload = `<script>alert("payload")</script>`
	hostileError   = `<img src=x onerror=alert("error")> gateway said no`
)

// fixtureSQL holds a failure group of three dead gateway timeouts, one
// retrying card decline, a done message, a dead message whose payload,
// error, stack and metadata are hostile markup, and a dead outbox row.
const fixtureSQL = `
INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
                               metadata, last_error, errors, received_at, available_at, processed_at, bucket)
SELECT 'payments', 'order-' || g, 'ChargeCard', 'dead', 3, 3, '\x00', convert_to('{"order":' || g || ',"cents":999}', 'UTF8'),
       '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}',
       'payment gateway timeout after ' || (28 + g) || 's',
       jsonb_build_array(
           jsonb_build_object('attempt', 1, 'at', now() - interval '50 minutes', 'error', 'payment gateway timeout after 30s'),
           jsonb_build_object('attempt', 2, 'at', now() - interval '20 minutes', 'error', 'payment gateway timeout after ' || (28 + g) || 's',
                              'trace', 'goroutine 7 [running]:' || chr(10) || 'main.charge(...)')),
       now() - interval '1 hour', now(), NULL, /* schema */inbox_bucket('order-' || g)
FROM generate_series(1, 3) AS g;
INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
                               last_error, errors, received_at, available_at, processed_at, bucket)
VALUES
('payments', 'declined-1', 'ChargeCard', 'pending', 1, 25, '\x00', '{"order":9}', 'card declined: insufficient funds',
 jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '5 minutes', 'error', 'card declined: insufficient funds')),
 now() - interval '6 minutes', now() + interval '1 hour', NULL, /* schema */inbox_bucket('declined-1')),
('payments', 'done-1', 'ChargeCard', 'done', 1, 25, '\x00', '{"order":10}', NULL, '[]', now() - interval '2 minutes', now(),
 now() - interval '1 minute', /* schema */inbox_bucket('done-1')),
('shipping', 'evil-1', 'LabelPrinted', 'dead', 1, 1, '\x00', convert_to($1, 'UTF8'), $2,
 jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '3 minutes', 'error', $2::text, 'trace', $1::text)),
 now() - interval '4 minutes', now(), NULL, /* schema */inbox_bucket('evil-1'));
UPDATE /* schema */inbox SET metadata = jsonb_build_object($1::text, $2::text) WHERE message_id = 'evil-1';
INSERT INTO /* schema */outbox (id, topic, event_type, status, attempts, available_at, created_at, payload, metadata, last_error, errors, bucket)
VALUES ('019a0000-0000-7000-8000-000000000002', 'orders', 'OrderPaid', 'dead', 3, now(), now() - interval '30 minutes',
        '{"order":2}', '{}', 'publish: nats: no responders available for request',
        jsonb_build_array(jsonb_build_object('attempt', 3, 'at', now() - interval '29 minutes',
                                             'error', 'publish: nats: no responders available for request')), /* schema */outbox_bucket('019a0000-0000-7000-8000-000000000002'));`

// testBundle is one test's console, on a schema of its own holding
// fixtureSQL's rows, served over HTTP on loopback.
type testBundle struct {
	adm     *admin.Admin
	console *Console
	logs    *syncBuffer
	schema  string
	srv     *httptest.Server
}

// setup serves a console configured as cfg (its Targets and Logger filled
// in) on a fresh fixture schema.
func setup(t *testing.T, cfg Config) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	b := &testBundle{schema: pgtest.Schema(t), logs: &syncBuffer{}}
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	// Simple protocol: several statements in one Exec, with parameters.
	for _, stmt := range strings.Split(ident.Render(fixtureSQL, b.schema), ";\n") {
		args := []any{}
		if strings.Contains(stmt, "$1") {
			args = []any{hostilePayload, hostileError}
		}
		_, err = conn.Exec(ctx, stmt, args...)
		require.NoError(t, err)
	}
	conn.Release()
	b.adm, err = admin.New(pool, admin.Config{Schema: b.schema})
	require.NoError(t, err)
	cfg.Targets = append([]Target{{Admin: b.adm, Name: "test"}}, cfg.Targets...)
	cfg.Logger = slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.console, err = New(cfg)
	require.NoError(t, err)
	b.srv = httptest.NewServer(b.console)
	t.Cleanup(func() {
		b.srv.Close()
		require.NoError(t, b.console.Close(context.Background()))
	})
	return b
}

// client is an HTTP client that does not follow redirects, so a test sees
// where an action sends the browser.
var client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends r and returns the status and body.
func do(t *testing.T, r *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := client.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// get fetches path, and returns the status and body.
func (b *testBundle) get(t *testing.T, path string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	require.NoError(t, err)
	resp, body := do(t, r)
	return resp.StatusCode, body
}

// post sends form to path with the console's CSRF token for the console's
// own user, and returns the response and body.
func (b *testBundle) post(t *testing.T, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	form.Set("csrf", b.console.csrfToken(b.console.cfg.Actor))
	return do(t, b.postRequest(t, path, form))
}

// postRequest is a POST of form to path, with no CSRF token added.
func (b *testBundle) postRequest(t *testing.T, path string, form url.Values) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

// group returns the fingerprint of the fixture's gateway timeouts.
func (b *testBundle) group(t *testing.T) string {
	t.Helper()
	groups, err := b.adm.Failures(context.Background(), admin.FailuresOptions{Consumer: "payments"})
	require.NoError(t, err)
	require.NotEmpty(t, groups)
	require.EqualValues(t, 3, groups[0].Count, "the gateway timeouts are the largest group")
	return groups[0].Fingerprint
}

// exec runs query on the bundle's schema.
func (b *testBundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(query, b.schema), args...)
	require.NoError(t, err)
}

// count counts the schema's inbox rows matching where.
func (b *testBundle) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	err := pgtest.Pool(t).QueryRow(context.Background(), ident.Render("SELECT count(*) FROM /* schema */inbox WHERE "+where, b.schema)).Scan(&n)
	require.NoError(t, err)
	return n
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// redactPassword stands in for inboxctl's redaction of a DSN's password.
var redactPassword = strings.NewReplacer("hunter2", "xxxxx")

// waitLog waits for the console's log to hold text.
func (b *testBundle) waitLog(t *testing.T, text string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(b.logs.String(), text) }, 10*time.Second, time.Millisecond,
		"the log never said %s: %s", text, b.logs)
}
