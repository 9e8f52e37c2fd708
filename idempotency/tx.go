package idempotency

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgbox/pgbox/internal/dberr"
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
// A database outage (a failover, a restart) that cuts tx is waited out for
// up to Config.OutageRetry: cut before its commit, tx rolled back and next
// runs again, on a new transaction, with the same request body; cut at its
// commit, the key tells whether the commit happened, and next never runs
// again for one that did. So next may run more than once for one request,
// but only one of its transactions commits.
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
//
// An outage of the database (see outage) that cuts the transaction before
// its commit rolled it back: the handler runs again, from the start, on a
// new one, as long as the request's budget lasts. A commit whose outcome
// the outage lost is looked up in the key: done, it happened, and the
// stored response is sent; still this request's, it did not, and the
// handler runs again. Nothing is sent before the commit (the recorder
// buffers it), so a response is never half sent when this happens. An
// unprotected request's body was not kept, so only its begin is retried.
func (m *Middleware) runTx(w http.ResponseWriter, r *http.Request, c *claim, next TxHandlerFunc) {
	o := m.outage(r, c)
	for {
		end, err, answer := m.attemptTx(w, r, o, c, next)
		if end == txInDoubt && c != nil {
			end, answer = m.resolve(w, o, c, answer)
		}
		if end == txAnswered || c == nil || !o.again(err) {
			answer()
			return
		}
		m.cfg.Logger.WarnContext(r.Context(), "idempotency: the database cut the handler's transaction before its commit; running the handler again",
			append(m.attrs(c), slog.String("error", err.Error()))...)
		r.Body, _ = r.GetBody() // serve buffered it
	}
}

// txEnd is how an attempt of a WrapTx handler ended.
type txEnd int

const (
	// txAnswered: its answer is to be sent as it is.
	txAnswered txEnd = iota
	// txCut: an outage cut its transaction before its commit, so nothing
	// of it happened.
	txCut
	// txInDoubt: an outage cut its commit, which may have happened.
	txInDoubt
)

// attemptTx runs next once, in a transaction of its own. It returns how
// that ended, the outage's error when one cut it, and answer, which sends
// the attempt's answer: next's response, or the problem that says why it
// is not.
func (m *Middleware) attemptTx(w http.ResponseWriter, r *http.Request, o *outage, c *claim, next TxHandlerFunc) (end txEnd, cut error, answer func()) {
	// A transaction left idle for a whole lease (a stalled process) is
	// ended by the server: its locks must not outlive the lease, by which
	// time a retry may need the same rows.
	var tx pgx.Tx
	err := o.retry(func(ctx context.Context) (err error) {
		tx, err = m.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: m.q.beginTx})
		return err
	})
	if err != nil {
		return txAnswered, nil, func() {
			m.release(o, c)
			m.unavailable(w, c, "begin the handler's transaction", err)
		}
	}
	rec := newRecorder()
	returned := false
	defer func() {
		if !returned { // next panicked, or called runtime.Goexit
			ctx, cancel := m.bookkeepingContext(r)
			defer cancel()
			_ = tx.Rollback(ctx)
			m.release(o, c)
		}
	}()
	m.call(rec, r, func(w http.ResponseWriter, r *http.Request) { next(w, r, tx) })
	returned = true

	// The middleware's own statements (store the response, commit) get
	// their whole timeout from here: the handler may have run longer.
	ctx, cancel := m.bookkeepingContext(r)
	defer cancel()
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit

	res := rec.finish()
	if !final(res.status) {
		// Perhaps next failed because an outage cut its transaction.
		cut := m.cutUnder(ctx, tx)
		_ = tx.Rollback(ctx)
		return cutOr(cut), cut, func() {
			m.release(o, c)
			res.write(w)
		}
	}
	if c != nil {
		n, err := m.complete(ctx, tx, c, res)
		if err != nil {
			_ = tx.Rollback(ctx)
			return cutOr(cutErr(err)), err, func() {
				m.release(o, c)
				m.notCommitted(w, c, "store the response in the handler's transaction", err)
			}
		}
		if n == 0 {
			_ = tx.Rollback(ctx)
			return txAnswered, nil, func() {
				m.cfg.Logger.ErrorContext(ctx, "idempotency: the handler outlived its lease and another request took its key over: its transaction is rolled back",
					m.attrs(c)...)
				writeProblem(w, problemInProgress.with(
					"This request took longer than its lease and a retry with the same key took over: nothing this request did was committed. Retry after the Retry-After delay, with the same key, to receive that request's response."),
					m.cfg.RetryAfter)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		end := txAnswered
		if dberr.Cut(err) {
			// Even an error pgx deems safe to retry (nothing sent) is
			// looked up: the key tells for sure.
			end = txInDoubt
		}
		return end, err, func() {
			// If the commit did happen after all (the connection broke
			// after the server committed), the key is done, release
			// matches nothing and the retry gets the stored response.
			m.release(o, c)
			m.notCommitted(w, c, "commit the handler's transaction", err)
		}
	}
	return txAnswered, nil, func() { res.write(w) }
}

// resolve finds out whether a commit whose outcome an outage cut happened, from c's key, waiting out the outage within o's budget. It
// returns txAnswered, and an answer that sends the stored response, when
// the commit happened; txCut, to run the handler again, when the key is
// still c's and so the commit did not happen; and otherwise txAnswered
// with answer, the attempt's own answer (500: retry with the same key).
func (m *Middleware) resolve(w http.ResponseWriter, o *outage, c *claim, answer func()) (txEnd, func()) {
	var k keyRow
	if o.retry(func(ctx context.Context) (err error) { k, err = m.look(ctx, c); return err }) != nil {
		return txAnswered, answer
	}
	switch {
	case k.found && k.state == "done":
		res, err := k.response()
		if err != nil {
			return txAnswered, answer
		}
		m.cfg.Logger.WarnContext(context.Background(), "idempotency: the database cut the commit of the handler's transaction, which happened: its stored response is sent",
			m.attrs(c)...)
		return txAnswered, func() { res.write(w) }
	case k.found && k.state == "in_progress" && k.token != nil && *k.token == c.token:
		return txCut, answer
	}
	return txAnswered, answer
}

// cutOr returns txCut if cut is set, txAnswered if not.
func cutOr(cut error) txEnd {
	if cut != nil {
		return txCut
	}
	return txAnswered
}

// cutErr returns err if it is an outage's (dberr.Cut), nil if not.
func cutErr(err error) error {
	if dberr.Cut(err) {
		return err
	}
	return nil
}

// errReadOnly stands for the error a write meets on a server that is
// read-only: cutUnder finds such a server without seeing the error.
var errReadOnly = &pgconn.PgError{Code: "25006", Message: "the server is read-only: a primary demoted, or about to be"}

// cutUnder returns the outage's error if one cut tx under its handler, nil
// if not: its connection is gone, or it was aborted on a server that is
// now read-only (a handler's write failed there with 25006). Only an
// aborted transaction costs a round trip, on another connection.
func (m *Middleware) cutUnder(ctx context.Context, tx pgx.Tx) error {
	pc := tx.Conn().PgConn()
	switch {
	case pc.IsClosed():
		return pgconn.ErrConnClosed
	case pc.TxStatus() != 'E':
		return nil
	}
	var readOnly bool
	err := m.pool.QueryRow(ctx, "SELECT current_setting('transaction_read_only') = 'on'").Scan(&readOnly)
	switch {
	case dberr.Cut(err):
		return err
	case readOnly:
		return errReadOnly
	}
	return nil
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
