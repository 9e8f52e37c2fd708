package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/idempotency"
)

// setupCharges adds a charges table to the bundle's schema: the effect
// that WrapTx handlers write in the request's transaction.
func (b *testBundle) setupCharges(t *testing.T) {
	t.Helper()
	b.exec(t, "CREATE TABLE /* schema */charges (id bigserial PRIMARY KEY, note text)")
}

func (b *testBundle) insertCharge(ctx context.Context, tx pgx.Tx, note string) error {
	_, err := tx.Exec(ctx, b.sql("INSERT INTO /* schema */charges (note) VALUES ($1)"), note)
	return err
}

func (b *testBundle) charges(t *testing.T) int {
	t.Helper()
	return b.count(t, "SELECT count(*) FROM /* schema */charges")
}

func TestWrapTxCommitsTheWritesWithTheStoredResponse(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{})
	b.setupCharges(t)
	runs := 0
	h := m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		runs++
		if err := b.insertCharge(r.Context(), tx, "charged"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"charged":4200}`)
	})
	req := request{target: "/charges", key: "k", body: `{"cents":4200}`}

	require.Equal(t, http.StatusCreated, send(h, req).Status)
	again := send(h, req)
	require.True(t, again.replayed())
	require.Equal(t, `{"charged":4200}`, string(again.Body))
	require.Equal(t, 1, runs)
	require.Equal(t, 1, b.charges(t))

	// One transaction wrote both: the charge row and the key's done row
	// carry the same transaction id.
	var chargeTx, keyTx string
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT xmin::text FROM /* schema */charges")).Scan(&chargeTx))
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT xmin::text FROM /* schema */idempotency_keys WHERE key = 'k'")).Scan(&keyTx))
	require.Equal(t, chargeTx, keyTx)
}

// Whenever the response is not stored, nothing the handler wrote is
// committed, and the key is released for the retry, which then commits
// once.
func TestWrapTxRollsBackWritesAndReleasesTheKey(t *testing.T) {
	t.Parallel()

	for name, fail := range map[string]func(b *testBundle, w http.ResponseWriter, r *http.Request, tx pgx.Tx){
		// The handler answers 5xx after writing.
		"ServerError": func(_ *testBundle, w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
			http.Error(w, "gateway down", http.StatusBadGateway)
		},
		// The handler panics after writing.
		"Panic": func(_ *testBundle, w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
			w.WriteHeader(http.StatusCreated)
			panic("boom")
		},
		// A statement failed, but the handler answers 201 anyway: storing
		// the response fails in the aborted transaction.
		"AbortedTransaction": func(_ *testBundle, w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
			_, _ = tx.Exec(r.Context(), "SELECT 1/0")
			w.WriteHeader(http.StatusCreated)
		},
		// The commit itself fails: a deferred constraint is checked then.
		"CommitFails": func(b *testBundle, w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
			_, err := tx.Exec(r.Context(), b.sql("INSERT INTO /* schema */deferred VALUES (1), (1)"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, b := setup(t, idempotency.Config{})
			b.setupCharges(t)
			b.exec(t, "CREATE TABLE /* schema */deferred (n int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
			runs := 0
			h := m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
				runs++
				if err := b.insertCharge(r.Context(), tx, fmt.Sprint("run ", runs)); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				if runs == 1 {
					fail(b, w, r, tx)
					return
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "charged")
			})
			req := request{target: "/charges", key: "k"}

			var failed reply
			if name == "Panic" {
				require.PanicsWithValue(t, "boom", func() { send(h, req) })
			} else {
				failed = send(h, req)
				require.GreaterOrEqual(t, failed.Status, 500)
			}
			if name == "AbortedTransaction" || name == "CommitFails" {
				p := failed.problem(t)
				require.Equal(t, http.StatusInternalServerError, p.Status)
				require.Equal(t, "The request was not committed", p.Title)
				require.Contains(t, p.Detail, "retry with the same key")
			}
			require.Zero(t, b.charges(t), "the handler's write rolled back")
			require.Nil(t, b.row(t, "k"), "the key is released")

			retried := send(h, req)
			require.Equal(t, http.StatusCreated, retried.Status)
			require.False(t, retried.replayed())
			require.True(t, send(h, req).replayed())
			require.Equal(t, 2, runs)
			require.Equal(t, 1, b.charges(t))
		})
	}
}

// Requests that carry no key (allowed) or use an unprotected method still
// run in a transaction, committed when the answer is final.
func TestWrapTxWithoutAKeyStillRunsInATransaction(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{AllowMissingKey: true})
	b.setupCharges(t)
	h := m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		if err := b.insertCharge(r.Context(), tx, r.Method); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})

	require.Equal(t, http.StatusCreated, send(h, request{target: "/charges"}).Status)
	require.Equal(t, http.StatusCreated, send(h, request{method: http.MethodPut, target: "/charges"}).Status)
	require.Equal(t, http.StatusServiceUnavailable, send(h, request{target: "/charges?fail=1"}).Status)
	require.Equal(t, http.StatusServiceUnavailable, send(h, request{method: http.MethodPut, target: "/charges?fail=1"}).Status)
	require.Equal(t, 2, b.charges(t), "committed when final, rolled back otherwise")
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */idempotency_keys"))
}

// The middleware's own statements are timed from when they run, not from
// before the handler: a handler that takes longer than they may (its own
// bound is Config.HandlerTimeout) still has its response stored and its
// writes committed.
func TestWrapTxStoresTheResponseOfAHandlerLongerThanTheBookkeepingTimeout(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{})
	idempotency.SetBookkeepingTimeout(m, 200*time.Millisecond)
	b.setupCharges(t)
	h := m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		err := b.insertCharge(r.Context(), tx, "charged")
		if err == nil {
			// Longer than the middleware's statements may take.
			_, err = tx.Exec(r.Context(), "SELECT pg_catalog.pg_sleep(0.6)")
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	req := request{target: "/charges", key: "slow", body: `{"cents":4200}`}

	require.Equal(t, http.StatusCreated, send(h, req).Status)
	require.Equal(t, 1, b.charges(t))
	require.Equal(t, "done", b.row(t, "slow").State)
}
