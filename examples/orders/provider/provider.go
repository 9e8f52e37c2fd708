// Package provider plays the outside world the example's services call: a
// payment gateway (Gateway) and a mail service (MailSink), each a small HTTP
// server in a process of its own.
//
// They behave the way real providers do (Stripe's idempotent requests, for
// instance). Every request must carry an Idempotency-Key. The first request
// with a key is applied: a charge made, an email sent. A later request with
// the same key and the same parameters is not applied again: it gets the
// first result back, marked with "Idempotent-Replayed: true". The same key
// with other parameters gets 422. A request with a new key is applied, even
// for an order already charged: that is exactly how a client that loses
// track of its keys double-charges its customers, and the demo would show it.
//
// Both record every request they receive, and everything they apply, in
// their own PostgreSQL schema, so the demo counts charges and emails from
// what the providers actually received, not from what the services believe
// they sent. They also misbehave on purpose, as real networks do
// (Config.FailRate, Config.LostRate), so that the services' retries, and the
// idempotency keys that make them safe, get exercised.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/pgbox/pgbox/examples/orders/ddl"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// IdempotencyKeyHeader is the request header carrying the client's key.
const IdempotencyKeyHeader = "Idempotency-Key"

// ReplayedHeader marks a response that repeats the answer to an earlier
// request with the same key.
const ReplayedHeader = "Idempotent-Replayed"

// Config configures a provider.
type Config struct {
	// FailRate is the fraction of requests answered 503 without being
	// applied: a provider having a bad moment. The client retries.
	FailRate float64

	// Logger receives the provider's errors. Defaults to slog.Default().
	Logger *slog.Logger

	// LostRate is the fraction of requests that are applied but whose
	// response never reaches the client: the connection is dropped after
	// the commit, as when a client times out or a load balancer cuts a slow
	// response. The client cannot tell this from a failure, retries with
	// the same key, and must get the first result back, not a second charge.
	LostRate float64

	// MaxLatency bounds the random time each request takes before it is
	// applied, so that requests are in flight when a client is killed.
	// Defaults to none.
	MaxLatency time.Duration

	// Pool connects to PostgreSQL. Required.
	Pool *pgxpool.Pool

	// Schema holds the provider's tables; its SQL names it, so the pool
	// needs no search_path. Required.
	Schema string
}

// server is what Gateway and MailSink share: the request log, the
// idempotent apply, and the injected faults.
type server struct {
	cfg  Config
	kind string // "charge" or "email", for messages
}

// record is a request's key and the order it is about.
type record struct {
	key     string
	orderID string
}

// result is what applying a request produced: the stored object, and
// whether it was applied by an earlier request with the same key.
type result struct {
	body     any
	replayed bool
}

// applyFunc applies a request inside tx: it stores the object under the
// record's key unless one is stored already, and returns the stored one.
// errMismatch means the key was used with other parameters.
//
// It takes two statements: an INSERT … ON CONFLICT DO NOTHING, then, if
// that inserted nothing, a SELECT of the stored object. The SELECT must be
// a statement of its own: when two requests with one key race, the loser's
// INSERT waits for the winner's commit and then does nothing, but a SELECT
// in the same statement would still use the snapshot taken before that
// commit and find nothing.
type applyFunc func(ctx context.Context, tx pgx.Tx, rec record) (result, error)

var errMismatch = errors.New("idempotency key reused with different parameters")

// serve handles one request: it decodes it, injects the configured faults,
// applies it in a transaction that also logs it, and answers.
func (s *server) serve(w http.ResponseWriter, r *http.Request, decode func([]byte) (string, error), apply applyFunc) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unreadable body"})
		return
	}
	rec := record{key: r.Header.Get(IdempotencyKeyHeader)}
	rec.orderID, err = decode(body)
	// The request is handled to the end even if the client goes away: a
	// provider does not stop charging because a client timed out.
	ctx := context.WithoutCancel(r.Context())
	caller := r.Header.Get("User-Agent")
	switch {
	case err != nil:
		s.logRequest(ctx, rec, "rejected", caller)
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	case rec.key == "":
		s.logRequest(ctx, rec, "rejected", caller)
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "an Idempotency-Key header is required"})
		return
	case rand.Float64() < s.cfg.FailRate:
		s.logRequest(ctx, rec, "unavailable", caller)
		w.Header().Set("Retry-After", "0")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "temporarily unavailable (injected): retry with the same key"})
		return
	}
	if s.cfg.MaxLatency > 0 {
		time.Sleep(rand.N(s.cfg.MaxLatency))
	}
	lost := rand.Float64() < s.cfg.LostRate

	var res result
	err = pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		var err error
		if res, err = apply(ctx, tx, rec); err != nil {
			return err
		}
		outcome := "applied"
		if res.replayed {
			outcome = "replayed"
		}
		_, err = tx.Exec(ctx, s.sql(insertRequestSQL), rec.key, rec.orderID, outcome, lost, caller)
		return err
	})
	switch {
	case errors.Is(err, errMismatch):
		s.logRequest(ctx, rec, "rejected", caller)
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error()})
		return
	case err != nil:
		s.cfg.Logger.Error("provider: could not apply a request", slog.String("kind", s.kind), slog.String("key", rec.key), slog.String("error", err.Error()))
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error: retry with the same key"})
		return
	}
	if lost {
		// Applied and committed, but the client never hears of it.
		// http.ErrAbortHandler makes net/http drop the connection without
		// an answer (and without logging a panic).
		panic(http.ErrAbortHandler)
	}
	if res.replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	writeJSON(w, http.StatusCreated, res.body)
}

// insertRequestSQL logs a request the provider received.
const insertRequestSQL = `
INSERT INTO {schema}.requests (idempotency_key, order_id, outcome, response_lost, caller)
VALUES (nullif($1, ''), nullif($2, ''), $3, $4, $5)`

// logRequest logs a request that was not applied, on its own.
func (s *server) logRequest(ctx context.Context, rec record, outcome, caller string) {
	if _, err := s.cfg.Pool.Exec(ctx, s.sql(insertRequestSQL), rec.key, rec.orderID, outcome, false, caller); err != nil {
		s.cfg.Logger.Error("provider: could not log a request", slog.String("kind", s.kind), slog.String("error", err.Error()))
	}
}

// requestsTableSQL creates the log of every request received. outcome is
// applied (a new key: charged, sent), replayed (a known key: the first
// result returned, nothing applied), unavailable (an injected 503) or
// rejected (a bad request, or a key reused with other parameters).
const requestsTableSQL = `
CREATE TABLE IF NOT EXISTS {schema}.requests (
    seq             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text,
    order_id        text,
    outcome         text        NOT NULL CHECK (outcome IN ('applied', 'replayed', 'unavailable', 'rejected')),
    response_lost   boolean     NOT NULL,
    caller          text        NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now()
)`

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sql renders one of the provider's queries for its schema.
func (s *server) sql(query string) string { return ddl.Render(s.cfg.Schema, query) }

func withDefaults(cfg Config) Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}
