package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/examples/orders/ddl"
	"github.com/pgbox/pgbox/examples/orders/provider"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The gateway is the demo's judge of double charges, so it must behave as
// a real provider does: one charge per key, the first result replayed to
// repeats, a key reused with other parameters refused, and a new key
// charged again even for the same order.
func TestGatewayChargesOncePerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, provider.Config{})

	key := uuid.NewString()
	first := b.charge(t, key, provider.ChargeRequest{OrderID: "order-1", Cents: 1200})
	require.Equal(t, http.StatusCreated, first.status)
	require.Empty(t, first.replayed)

	again := b.charge(t, key, provider.ChargeRequest{OrderID: "order-1", Cents: 1200})
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, "true", again.replayed)
	require.Equal(t, first.charge.ID, again.charge.ID, "a repeat gets the first charge back")

	other := b.charge(t, key, provider.ChargeRequest{OrderID: "order-1", Cents: 9900})
	require.Equal(t, http.StatusUnprocessableEntity, other.status, "a key reused with other parameters is refused")

	missing := b.charge(t, "", provider.ChargeRequest{OrderID: "order-1", Cents: 1200})
	require.Equal(t, http.StatusBadRequest, missing.status)

	second := b.charge(t, uuid.NewString(), provider.ChargeRequest{OrderID: "order-1", Cents: 1200})
	require.Equal(t, http.StatusCreated, second.status)
	require.NotEqual(t, first.charge.ID, second.charge.ID, "a new key is a new charge, whatever the order")

	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM {schema}.charges WHERE order_id = 'order-1'"))
	require.Equal(t, 5, b.count(t, "SELECT count(*) FROM {schema}.requests"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM {schema}.requests WHERE outcome = 'replayed'"))
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM {schema}.requests WHERE outcome = 'rejected'"))
}

// Requests with one key racing each other make one charge, and every one of
// them gets it.
func TestGatewayConcurrentRequestsWithOneKey(t *testing.T) {
	t.Parallel()
	b := setup(t, provider.Config{})
	key := uuid.NewString()
	ids := make([]string, 16)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			res := b.charge(t, key, provider.ChargeRequest{OrderID: "order-2", Cents: 500})
			if res.status == http.StatusCreated {
				ids[i] = res.charge.ID
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	require.NotEmpty(t, ids[0])
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM {schema}.charges"))
	require.Equal(t, 15, b.count(t, "SELECT count(*) FROM {schema}.requests WHERE outcome = 'replayed'"))
}

// A lost answer is a charge the client never hears of; its retry with the
// same key gets that charge, and no second one is made.
func TestGatewayLostAnswerIsReplayedToTheRetry(t *testing.T) {
	t.Parallel()
	lossy := setup(t, provider.Config{LostRate: 1})
	key := uuid.NewString()
	_, err := lossy.post(key, provider.ChargeRequest{OrderID: "order-3", Cents: 700})
	require.Error(t, err, "the connection is dropped without an answer")
	require.Equal(t, 1, lossy.count(t, "SELECT count(*) FROM {schema}.charges"), "but the charge was made")
	require.Equal(t, 1, lossy.count(t, "SELECT count(*) FROM {schema}.requests WHERE response_lost"))
}

// The mail sink sends once per key too.
func TestMailSinkSendsOncePerKey(t *testing.T) {
	t.Parallel()
	pool, schema := schemaPool(t)
	sink := provider.NewMailSink(provider.Config{Pool: pool, Schema: schema})
	require.NoError(t, sink.Migrate(t.Context()))
	srv := httptest.NewServer(sink.Handler())
	t.Cleanup(srv.Close)

	send := func(key, to string) *http.Response {
		body, _ := json.Marshal(provider.Email{OrderID: "order-4", Subject: "paid", Text: "thanks", To: to})
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", bytes.NewReader(body))
		req.Header.Set(provider.IdempotencyKeyHeader, key)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	key := uuid.NewString()
	require.Equal(t, http.StatusCreated, send(key, "a@example.com").StatusCode)
	replay := send(key, "a@example.com")
	require.Equal(t, http.StatusCreated, replay.StatusCode)
	require.Equal(t, "true", replay.Header.Get(provider.ReplayedHeader))
	require.Equal(t, http.StatusUnprocessableEntity, send(key, "b@example.com").StatusCode)
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), ddl.Render(schema, "SELECT count(*) FROM {schema}.messages")).Scan(&n))
	require.Equal(t, 1, n)
}

type bundle struct {
	pool   *pgxpool.Pool
	schema string
	srv    *httptest.Server
}

type chargeResult struct {
	charge   provider.Charge
	replayed string
	status   int
}

// setup starts a gateway with its own schema behind a test server.
func setup(t *testing.T, cfg provider.Config) *bundle {
	t.Helper()
	pool, schema := schemaPool(t)
	cfg.Pool, cfg.Schema = pool, schema
	g := provider.NewGateway(cfg)
	require.NoError(t, g.Migrate(t.Context()))
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return &bundle{pool: pool, schema: schema, srv: srv}
}

// schemaPool returns a pool and a fresh schema of the test's own for a
// provider's tables.
func schemaPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	schema := pgtest.EmptySchema(t)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, schema
}

func (b *bundle) post(key string, req provider.ChargeRequest) (*http.Response, error) {
	body, _ := json.Marshal(req)
	r, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/v1/charges", bytes.NewReader(body))
	if key != "" {
		r.Header.Set(provider.IdempotencyKeyHeader, key)
	}
	return b.srv.Client().Do(r)
}

func (b *bundle) charge(t *testing.T, key string, req provider.ChargeRequest) chargeResult {
	t.Helper()
	resp, err := b.post(key, req)
	require.NoError(t, err)
	defer resp.Body.Close()
	res := chargeResult{replayed: resp.Header.Get(provider.ReplayedHeader), status: resp.StatusCode}
	if resp.StatusCode == http.StatusCreated {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&res.charge))
	}
	return res
}

// count runs a count query, "{schema}" rendered with the bundle's schema.
func (b *bundle) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), ddl.Render(b.schema, q)).Scan(&n))
	return n
}
