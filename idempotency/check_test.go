package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/idempotency"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/pgboxtest"
)

// The middleware passes the test kit's idempotency check over real HTTP:
// each charge is sent 8 times in a row (the first answer fresh, the rest
// replays) and 8 times at once (each a 201 or a 409), the server is shut
// down abruptly and replaced between deliveries, and every charge exists
// exactly once.
func TestWrapTxPassesTheIdempotencyCheck(t *testing.T) {
	t.Parallel()
	b := &testBundle{pool: pgtest.NewPool(t, 16), schema: pgtest.Schema(t)}
	m := b.middleware(t, idempotency.Config{})
	b.setupCharges(t)
	mux := http.NewServeMux()
	mux.Handle("POST /charges", m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		body, _ := io.ReadAll(r.Body)
		if err := b.insertCharge(r.Context(), tx, string(body)); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))

	var srv atomic.Pointer[httptest.Server]
	start := func(context.Context) error {
		srv.Store(httptest.NewServer(mux))
		return nil
	}
	_ = start(context.Background())
	t.Cleanup(func() { srv.Load().Close() })

	pgboxtest.RequireIdempotent(t, pgboxtest.IdempotencyCheck{
		Deliver: func(ctx context.Context, d pgboxtest.Delivery) error {
			s := srv.Load()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/charges", strings.NewReader(fmt.Sprint("charge-", d.Round)))
			if err != nil {
				return err
			}
			req.Header.Set("Idempotency-Key", fmt.Sprint("charge-", d.Round))
			resp, err := s.Client().Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			replayed := resp.Header.Get(idempotency.ReplayedHeader) == "true"
			switch {
			case d.Concurrent && (resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusConflict):
				return nil // the first, its replay, or a duplicate while it ran
			case resp.StatusCode == http.StatusCreated && replayed == (d.Attempt > 1):
				return nil // one after another: the first, then replays
			}
			return fmt.Errorf("delivery %d of round %d: %s (replayed: %t): %s", d.Attempt, d.Round, resp.Status, replayed, body)
		},
		Crash: func(context.Context) error {
			s := srv.Load()
			s.CloseClientConnections()
			s.Close()
			return nil
		},
		Restart: start,
		Effect: func(ctx context.Context, round int) (int, error) {
			var n int
			err := b.pool.QueryRow(ctx, b.sql("SELECT count(*) FROM /* schema */charges WHERE note = $1"), fmt.Sprint("charge-", round)).Scan(&n)
			return n, err
		},
	})
}
