package idempotency_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/idempotency"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	pool   *pgxpool.Pool
	schema string
}

// setup gives a test its own migrated schema and a Middleware on it, with
// logs on the test's output.
func setup(t *testing.T, cfg idempotency.Config) (*idempotency.Middleware, *testBundle) {
	t.Helper()
	return setupOn(t, pgtest.Pool(t), cfg)
}

// setupOn is setup with the Middleware, and the test's own queries, on
// pool.
func setupOn(t *testing.T, pool *pgxpool.Pool, cfg idempotency.Config) (*idempotency.Middleware, *testBundle) {
	t.Helper()
	b := &testBundle{pool: pool, schema: pgtest.Schema(t)}
	return b.middleware(t, cfg), b
}

// middleware returns another Middleware on the bundle's schema: another
// process, as far as the keys are concerned.
func (b *testBundle) middleware(t *testing.T, cfg idempotency.Config) *idempotency.Middleware {
	t.Helper()
	cfg.Schema = b.schema
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	m, err := idempotency.New(b.pool, cfg)
	require.NoError(t, err)
	return m
}

func (b *testBundle) sql(q string) string { return ident.Render(q, b.schema) }

func (b *testBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), b.sql(q), args...)
	require.NoError(t, err)
}

func (b *testBundle) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(q), args...).Scan(&n))
	return n
}

// keyRow is an idempotency_keys row as stored.
type keyRow struct {
	Attempts int
	Body     []byte
	Headers  map[string][]string
	State    string
	Status   *int
}

// row returns the row of key (on any route, for any caller), or nil.
func (b *testBundle) row(t *testing.T, key string) *keyRow {
	t.Helper()
	var r keyRow
	err := b.pool.QueryRow(context.Background(), b.sql(
		"SELECT attempts, body, headers, state, status FROM /* schema */idempotency_keys WHERE key = $1"), key).
		Scan(&r.Attempts, &r.Body, &r.Headers, &r.State, &r.Status)
	if err == pgx.ErrNoRows {
		return nil
	}
	require.NoError(t, err)
	return &r
}

// reply is a response as the client saw it.
type reply struct {
	Body   []byte
	Header http.Header
	Status int
}

func (r reply) replayed() bool { return r.Header.Get(idempotency.ReplayedHeader) == "true" }

// problem decodes a problem response, checking its media type and status.
func (r reply) problem(t *testing.T) idempotency.Problem {
	t.Helper()
	require.Equal(t, idempotency.ProblemContentType, r.Header.Get("Content-Type"), "body: %s", r.Body)
	var p idempotency.Problem
	require.NoError(t, json.Unmarshal(r.Body, &p))
	require.Equal(t, r.Status, p.Status)
	require.NotEmpty(t, p.Title)
	require.NotEmpty(t, p.Detail)
	require.True(t, strings.HasPrefix(p.Type, "https://"), p.Type)
	return p
}

// request is one request a test sends.
type request struct {
	body   string
	header http.Header
	key    string // sent as Idempotency-Key unless empty
	method string // POST unless set
	target string
}

// send serves req through h in-process and returns what the client got.
// It is safe to call from any goroutine.
func send(h http.Handler, req request) reply {
	method := req.method
	if method == "" {
		method = http.MethodPost
	}
	r := httptest.NewRequest(method, req.target, strings.NewReader(req.body))
	for name, values := range req.header {
		r.Header[name] = values
	}
	if req.key != "" {
		r.Header.Set("Idempotency-Key", req.key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	body, _ := io.ReadAll(res.Body) // a recorder's body cannot fail
	return reply{Body: body, Header: res.Header, Status: res.StatusCode}
}
