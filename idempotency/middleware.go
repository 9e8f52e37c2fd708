package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/schemaerr"
)

// ReplayedHeader is set to "true" on every replayed response, so a client
// (or a person reading logs) can tell a replay from the first answer.
const ReplayedHeader = "Idempotent-Replayed"

// bookkeepingTimeout bounds each of the middleware's own statements. They
// run on a context the client's disconnecting does not cancel: a handler
// whose effect happened must get its response stored even if the client
// has gone, so that the client's retry is answered with it.
const bookkeepingTimeout = 10 * time.Second

// cleanupBatchDefault is how many keys one DeleteExpired statement deletes.
const cleanupBatchDefault = 1000

// maxAcquireTries bounds how often a request looks again at a key that
// changed under it (released, taken over or restarted by another request)
// before answering 409.
const maxAcquireTries = 3

// Middleware makes retried requests safe: the first request with a given
// Idempotency-Key runs the handler once, and its response is stored in
// PostgreSQL and replayed to every later request with the same key. Create
// one with New and wrap handlers with Wrap or WrapTx. It is safe for
// concurrent use, and several processes may share one schema.
type Middleware struct {
	cfg          Config
	bookkeeping  time.Duration // bookkeepingTimeout; tests shorten it
	cleanupBatch int
	cleanupHook  func(deleted int64) // tests: called after each statement
	methods      map[string]bool
	pool         *pgxpool.Pool
	q            queries
	replay       []string // the header allow-list
}

type queries struct {
	beginTx, claim, cleanup, complete, lookup, release, restart, takeOver string
}

// New returns a Middleware storing keys in cfg.Schema through pool. It
// checks the configuration but does not touch the database: a schema that
// is missing or outdated is logged, with the command that fixes it, by the
// first request that needs it.
func New(pool *pgxpool.Pool, cfg Config) (*Middleware, error) {
	if pool == nil {
		return nil, errors.New("idempotency: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Middleware{
		cfg:          cfg,
		bookkeeping:  bookkeepingTimeout,
		cleanupBatch: cleanupBatchDefault,
		methods:      make(map[string]bool, len(cfg.Methods)),
		pool:         pool,
		q: queries{
			beginTx:  fmt.Sprintf("BEGIN; SET LOCAL idle_in_transaction_session_timeout = %d", cfg.Lease.Milliseconds()),
			claim:    ident.Render(claimSQL, cfg.Schema),
			cleanup:  ident.Render(cleanupSQL, cfg.Schema),
			complete: ident.Render(completeSQL, cfg.Schema),
			lookup:   ident.Render(lookupSQL, cfg.Schema),
			release:  ident.Render(releaseSQL, cfg.Schema),
			restart:  ident.Render(restartSQL, cfg.Schema),
			takeOver: ident.Render(takeOverSQL, cfg.Schema),
		},
		replay: append(append([]string(nil), defaultReplayHeaders...), cfg.ReplayHeaders...),
	}
	for _, method := range cfg.Methods {
		m.methods[method] = true
	}
	return m, nil
}

// Wrap returns next protected by idempotency keys. Its signature makes it
// usable wherever a func(http.Handler) http.Handler middleware is.
//
// For a request with a key, next writes to a buffer: its response reaches
// the client once it is stored, whole, so next cannot stream (http.Flusher)
// or hijack the connection, and its request context ends after
// Config.HandlerTimeout. Requests that need no key (another method, or a
// missing key with Config.AllowMissingKey) reach next untouched.
//
// next's own writes to the database commit on their own, before its
// response is stored. If the response cannot be stored (the database
// failed at that moment) it is still sent, and logged; a retry after the
// lease then runs next again. Use WrapTx for writes that must happen
// exactly once.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, func(w http.ResponseWriter, r *http.Request, c *claim) {
			if c == nil {
				next.ServeHTTP(w, r) // unprotected: nothing to store
				return
			}
			m.run(w, r, c, next)
		})
	})
}

// claim is a key this request holds: it runs the handler and must then
// store the response or release the key, fenced by token.
type claim struct {
	requestKey
	token int64
}

// serve answers everything that can be answered without the handler
// (wrong or missing key, replay, duplicate in flight) and hands the rest to
// run, with the claim the request holds, or with nil when the request is
// not protected (a method not in Config.Methods, or a missing key with
// Config.AllowMissingKey).
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, run func(http.ResponseWriter, *http.Request, *claim)) {
	if !m.methods[r.Method] {
		run(w, r, nil)
		return
	}
	key, present, err := readKey(r, m.cfg.KeyHeader)
	switch {
	case err != nil:
		writeProblem(w, problemKeyInvalid.with(err.Error()), 0)
		return
	case !present && m.cfg.AllowMissingKey:
		run(w, r, nil)
		return
	case !present:
		writeProblem(w, problemKeyMissing.with(fmt.Sprintf(
			"This operation is idempotent and requires an %s header: send a unique key, such as a UUID, and send the same key only to retry this same request.",
			m.cfg.KeyHeader)), 0)
		return
	}

	body, p := m.readBody(w, r)
	if p != nil {
		writeProblem(w, *p, 0)
		return
	}
	r = r.WithContext(r.Context()) // a copy, whose body is the buffered one
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }

	c := &claim{requestKey: requestKey{key: key, route: scopeName(m.cfg.RouteFunc(r))}, token: newToken()}
	if m.cfg.ScopeFunc != nil {
		c.caller = scopeName(m.cfg.ScopeFunc(r))
	}
	fp := fingerprint(r, body)
	var got acquired
	err = m.outage(r, c).retry(func(ctx context.Context) (err error) {
		got, err = m.acquire(ctx, c, fp)
		return err
	})
	switch {
	case err != nil:
		m.unavailable(w, c, "look up the key", err)
	case got.claimed:
		run(w, r, c)
	case got.replay != nil:
		got.replay.write(w, ReplayedHeader, "true")
	case got.mismatch:
		writeProblem(w, problemKeyReused.with(fmt.Sprintf(
			"This key was already used for a different request (its method, target or body differ): send a new key for a new request, and reuse a key only to retry the identical request. The key is remembered for %s after its first use.",
			m.cfg.Expiry)), 0)
	default:
		writeProblem(w, problemInProgress.with(
			"A request with this key is still being processed: retry after the Retry-After delay, with the same key, to receive its response."), m.cfg.RetryAfter)
	}
}

// acquired is what acquire found: the key is this request's to run
// (claimed), or it holds a response to replay, or it was used for another
// request (mismatch), or, when none is set, a request with it is running.
type acquired struct {
	claimed  bool
	mismatch bool
	replay   *response
}

// acquire claims c's key for this request, or says why it cannot. See
// queries.go for how each statement keeps concurrent requests apart. It
// may be tried again after an outage cut it: a claim made under c's token
// is c's.
func (m *Middleware) acquire(ctx context.Context, c *claim, fp []byte) (acquired, error) {
	lease, expiry := m.cfg.Lease.Milliseconds(), m.cfg.Expiry.Milliseconds()
	for range maxAcquireTries {
		tag, err := m.pool.Exec(ctx, m.q.claim, c.route, c.caller, c.key, fp, c.token, lease, expiry)
		if err != nil {
			return acquired{}, err
		}
		if tag.RowsAffected() == 1 {
			return acquired{claimed: true}, nil
		}

		k, err := m.look(ctx, c)
		if err != nil {
			return acquired{}, err
		}
		if !k.found {
			continue // released or deleted since the claim: claim again
		}
		running := k.state == "in_progress"

		var sql string
		var args []any
		switch {
		case running && k.token != nil && *k.token == c.token:
			// This request's own claim, made by an earlier try whose
			// answer an outage cut (see outage).
			return acquired{claimed: true}, nil
		case k.expired && (!running || k.leaseOver):
			sql, args = m.q.restart, []any{c.route, c.caller, c.key, fp, c.token, lease, expiry}
		case !bytes.Equal(k.fingerprint, fp):
			return acquired{mismatch: true}, nil
		case !running:
			res, err := k.response()
			if err != nil {
				return acquired{}, err
			}
			return acquired{replay: &res}, nil
		case k.leaseOver:
			sql, args = m.q.takeOver, []any{c.route, c.caller, c.key, *k.token, c.token, lease}
		default:
			return acquired{}, nil // running: 409
		}
		tag, err = m.pool.Exec(ctx, sql, args...)
		if err != nil {
			return acquired{}, err
		}
		if tag.RowsAffected() == 1 {
			if sql == m.q.takeOver {
				m.cfg.Logger.WarnContext(ctx, "idempotency: took over a key whose request never answered (crashed, stalled or cut off); running the handler again",
					m.attrs(c)...)
			}
			return acquired{claimed: true}, nil
		}
		// Another request got there first: look again.
	}
	return acquired{}, nil // still contended: 409, and the client retries
}

// keyRow is a key's row as lookupSQL reads it; found is false when there
// is none.
type keyRow struct {
	found              bool
	state              string
	fingerprint        []byte
	token              *int64
	leaseOver, expired bool
	status             *int32
	headers, body      []byte
}

// look reads c's key.
func (m *Middleware) look(ctx context.Context, c *claim) (keyRow, error) {
	k := keyRow{found: true}
	err := m.pool.QueryRow(ctx, m.q.lookup, c.route, c.caller, c.key).
		Scan(&k.state, &k.fingerprint, &k.token, &k.leaseOver, &k.expired, &k.status, &k.headers, &k.body)
	if errors.Is(err, pgx.ErrNoRows) {
		return keyRow{}, nil
	}
	return k, err
}

// response is the stored response of a key that is done.
func (k keyRow) response() (response, error) {
	res := response{body: k.body, header: http.Header{}, status: int(*k.status)}
	if err := json.Unmarshal(k.headers, &res.header); err != nil {
		return response{}, fmt.Errorf("decode stored headers: %w", err)
	}
	return res, nil
}

// run runs a Wrap handler for a claimed key, then stores its response (or
// releases the key) and sends it.
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, c *claim, next http.Handler) {
	o := m.outage(r, c)
	rec := newRecorder()
	returned := false
	defer func() {
		if !returned {
			// next panicked (the panic goes on to net/http, which logs it
			// and drops the connection) or called runtime.Goexit. Nothing
			// was sent: free the key so that the client's retry runs afresh.
			m.release(o, c)
		}
	}()
	m.call(rec, r, func(w http.ResponseWriter, r *http.Request) { next.ServeHTTP(w, r) })
	returned = true

	res := rec.finish()
	if !final(res.status) {
		m.release(o, c)
		res.write(w)
		return
	}
	ctx, cancel := m.bookkeepingContext(r)
	defer cancel()
	n, err := m.complete(ctx, m.pool, c, res)
	switch {
	case err != nil:
		m.cfg.Logger.ErrorContext(ctx, "idempotency: could not store the response; sending it anyway: a retry after the lease will run the handler again",
			append(m.attrs(c), slog.String("error", m.explain(ctx, err).Error()))...)
	case n == 0:
		m.cfg.Logger.ErrorContext(ctx, "idempotency: the handler outlived its lease and another request took its key over: its response is sent but not stored, and the handler's effects may have happened twice (use WrapTx, or a longer Config.Lease)",
			m.attrs(c)...)
	}
	res.write(w)
}

// call runs a handler with its request context bounded by
// Config.HandlerTimeout.
func (m *Middleware) call(w http.ResponseWriter, r *http.Request, fn func(http.ResponseWriter, *http.Request)) {
	ctx, cancel := context.WithTimeout(r.Context(), m.cfg.HandlerTimeout)
	defer cancel()
	fn(w, r.WithContext(ctx))
}

// dbtx is a pool or a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// complete stores res under c's key, fenced by c's token, and returns how
// many rows it marked done: 0 when the key is no longer c's.
func (m *Middleware) complete(ctx context.Context, db dbtx, c *claim, res response) (int64, error) {
	headers, skipped := res.stored(m.replay)
	if len(skipped) > 0 {
		m.cfg.Logger.WarnContext(ctx, "idempotency: response headers left out of the stored response: not valid UTF-8, or hold a NUL",
			append(m.attrs(c), slog.Any("headers", skipped))...)
	}
	tag, err := db.Exec(ctx, m.q.complete, c.route, c.caller, c.key, c.token, int32(res.status), headers, nonNil(res.body))
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// release forgets c's key, so the client's retry runs the handler afresh,
// waiting out an outage within o's budget. Failing that, the key stays
// locked until its lease ends, and the retry waits that long: logged,
// nothing worse.
func (m *Middleware) release(o *outage, c *claim) {
	if c == nil {
		return
	}
	err := o.retry(func(ctx context.Context) error {
		_, err := m.pool.Exec(ctx, m.q.release, c.route, c.caller, c.key, c.token)
		return err
	})
	if err != nil {
		ctx := context.Background()
		m.cfg.Logger.ErrorContext(ctx, "idempotency: could not release the key; retries get 409 until its lease ends",
			append(m.attrs(c), slog.String("error", m.explain(ctx, err).Error()))...)
	}
}

// readBody reads the request body whole, to fingerprint it and hand it to
// the handler. A failure comes back as the problem to answer.
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *Problem) {
	if r.Body == nil {
		return []byte{}, nil
	}
	src := r.Body
	if m.cfg.MaxRequestBytes > 0 {
		src = http.MaxBytesReader(w, r.Body, m.cfg.MaxRequestBytes)
	}
	body, err := io.ReadAll(src)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		p := problemBodyTooLarge.with(fmt.Sprintf("The request body is over the %d-byte limit of this operation: send a smaller body.", tooLarge.Limit))
		return nil, &p
	}
	if err != nil {
		p := problemBodyUnreadable.with("The request body ended early or could not be read: send the request again, with the same key.")
		return nil, &p
	}
	return body, nil
}

// unavailable answers 503 when the key store cannot be used: running the
// handler without it could run it twice.
func (m *Middleware) unavailable(w http.ResponseWriter, c *claim, op string, err error) {
	ctx := context.Background()
	m.cfg.Logger.ErrorContext(ctx, "idempotency: could not "+op+"; answered 503",
		append(m.attrs(c), slog.String("error", m.explain(ctx, err).Error()))...)
	writeProblem(w, problemUnavailable.with(
		"The request was not run, because its key could not be checked: retry after the Retry-After delay, with the same key."), m.cfg.RetryAfter)
}

// explain turns the errors of an unmigrated or outdated schema into one
// that says what to run.
func (m *Middleware) explain(ctx context.Context, err error) error {
	return schemaerr.Explain(ctx, m.pool, m.cfg.Schema, err)
}

func (m *Middleware) attrs(c *claim) []any {
	if c == nil {
		return nil
	}
	return []any{slog.String("route", c.route), slog.String("caller", c.caller), slog.String("key", c.key)}
}

// bookkeepingContext returns the context for the middleware's own
// statements: not cancelled when the client goes away, bounded by
// bookkeepingTimeout from now. Make it when the statements are due, not
// before the handler runs, whose time is its own (Config.HandlerTimeout).
func (m *Middleware) bookkeepingContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), m.bookkeeping)
}

// newToken returns a random claim token: the fence on every write a
// request makes to its key after claiming it.
func newToken() int64 { return rand.Int64() }

// nonNil returns b, or an empty body for nil: the column is only NULL for
// a key whose request is still running.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
