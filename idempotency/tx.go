package idempotency

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
)

// TxHandlerFunc is a handler that makes its database writes in tx, the
// transaction that also stores its response. See WrapTx.
type TxHandlerFunc func(w http.ResponseWriter, r *http.Request, tx pgx.Tx)

// WrapTx returns next protected by idempotency keys, with next's writes and
// its stored response in one transaction: "charged" and "response stored"
// commit together or not at all, so the effect happens exactly once, even
// if the process is killed at any instant.
//
// The middleware claims the key first, in a statement of its own that
// commits at once, so duplicates arriving while next runs get 409 without
// waiting for it. Then it begins tx and calls next, which writes with tx and
// answers as usual. When the answer is final (below 500, and neither 408 nor
// 429), the response is stored in tx, fenced by the claim, and tx commits;
// only then is the response sent. Otherwise tx rolls back and the key is
// released for the client's retry. If next panics, tx rolls back, the key is
// released and the panic goes on. If storing or committing fails, or next
// outlived its lease and a retry has taken its key over, nothing of next's
// commits, and the client gets a problem response (500, or 409 when a retry
// holds the key) telling it to retry.
//
// next must not commit or roll back tx, and must not keep it after
// returning. A request that carries no key (with Config.AllowMissingKey) or
// uses a method outside Config.Methods still runs in a transaction, which
// commits under the same rule.
func (m *Middleware) WrapTx(next TxHandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, func(w http.ResponseWriter, r *http.Request, c *claim) {
			m.runTx(w, r, c, next)
		})
	})
}

// runTx runs a WrapTx handler in a transaction and commits it together
// with the stored response. c is nil for an unprotected request, which
// gets the transaction but stores nothing.
func (m *Middleware) runTx(w http.ResponseWriter, r *http.Request, c *claim, next TxHandlerFunc) {
	ctx, cancel := bookkeeping(r)
	defer cancel()

	// A transaction left idle for a whole lease (a stalled process) is
	// ended by the server: its locks must not outlive the lease, by which
	// time a retry may need the same rows.
	tx, err := m.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: m.q.beginTx})
	if err != nil {
		m.release(ctx, c)
		m.unavailable(w, c, "begin the handler's transaction", err)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit

	rec := newRecorder()
	returned := false
	defer func() {
		if !returned { // next panicked, or called runtime.Goexit
			_ = tx.Rollback(ctx)
			m.release(ctx, c)
		}
	}()
	m.call(rec, r, func(w http.ResponseWriter, r *http.Request) { next(w, r, tx) })
	returned = true

	res := rec.finish()
	if !final(res.status) {
		_ = tx.Rollback(ctx)
		m.release(ctx, c)
		res.write(w)
		return
	}
	if c != nil {
		n, err := m.complete(ctx, tx, c, res)
		if err != nil {
			_ = tx.Rollback(ctx)
			m.release(ctx, c)
			m.notCommitted(w, c, "store the response in the handler's transaction", err)
			return
		}
		if n == 0 {
			_ = tx.Rollback(ctx)
			m.cfg.Logger.ErrorContext(ctx, "idempotency: the handler outlived its lease and another request took its key over: its transaction is rolled back",
				m.attrs(c)...)
			writeProblem(w, problemInProgress.with(
				"This request took longer than its lease and a retry with the same key took over: nothing this request did was committed. Retry after the Retry-After delay, with the same key, to receive that request's response."),
				m.cfg.RetryAfter)
			return
		}
	}
	if err := tx.Commit(ctx); err != nil {
		// If the commit did happen after all (the connection broke after the
		// server committed), the key is done, release matches nothing and the
		// retry gets the stored response.
		m.release(ctx, c)
		m.notCommitted(w, c, "commit the handler's transaction", err)
		return
	}
	res.write(w)
}

// notCommitted answers 500 when the handler's transaction did not commit:
// its response claimed an effect that did not happen.
func (m *Middleware) notCommitted(w http.ResponseWriter, c *claim, op string, err error) {
	ctx := context.Background()
	m.cfg.Logger.ErrorContext(ctx, "idempotency: could not "+op+"; answered 500",
		append(m.attrs(c), slog.String("error", m.explain(ctx, err).Error()))...)
	writeProblem(w, problemNotCommitted.with(
		"The request's changes were not committed, because its transaction failed: retry with the same key. (Should they have been committed after all, the retry receives the stored response.)"), 0)
}
