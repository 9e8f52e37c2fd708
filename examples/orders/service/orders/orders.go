// Package orders is the orders service: an HTTP API that accepts orders.
//
// POST /orders runs behind pgbox's Idempotency-Key middleware (WrapTx): the
// order row, its OrderPlaced outbox message and the stored HTTP response
// commit in one transaction. A client that retries, because it timed out or
// lost the answer, gets the stored response, with the same order id, and no
// second order. A relay publishes the outbox to the broker.
//
//	client ──POST /orders──▶ idempotency key ─▶ BEGIN
//	                                              INSERT INTO orders …
//	                                              outbox.Write(OrderPlaced)
//	                                              store the response
//	                                            COMMIT ─▶ relay ─▶ broker
package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/examples/orders/ddl"
	"github.com/pgbox/pgbox/examples/orders/events"
	"github.com/pgbox/pgbox/idempotency"
	"github.com/pgbox/pgbox/migrations"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// CustomerHeader names the authenticated customer. It stands in for real
// authentication (a session, a JWT): the idempotency keys are scoped to
// it, so two customers can never see each other's stored responses.
const CustomerHeader = "X-Customer-ID"

// notifyInterval is how often, at most, this process's inbox and outbox
// wake idle workers with a NOTIFY. Every transaction that notifies holds
// PostgreSQL's single notification lock from its commit until its WAL is
// flushed, so several busy processes notifying every 10ms (the default)
// make the whole database's commits queue on that lock. One wake-up per
// 100ms is plenty; polling finds anything one missed.
const notifyInterval = 100 * time.Millisecond

// Config configures the service.
type Config struct {
	// Logger receives the service's logs. Defaults to slog.Default().
	Logger *slog.Logger

	// Pool connects to PostgreSQL. The service's SQL names Schema, so the
	// pool needs no search_path (nor any other session setting). Required.
	Pool *pgxpool.Pool

	// Publisher is where the relay publishes OrderPlaced messages: the
	// broker. Required.
	Publisher message.Publisher

	// Schema holds the service's tables and pgbox's (inbox, outbox,
	// idempotency keys). Required.
	Schema string
}

// Service is the orders service. Create it with New, serve Handler, and
// Start and Stop its relay.
type Service struct {
	cfg    Config
	idem   *idempotency.Middleware
	outbox *outbox.Outbox
	relay  *relay.Relay
}

// New returns the service. It does not touch the database.
func New(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg}
	var err error
	if s.outbox, err = outbox.New(cfg.Pool, outbox.Config{NotifyInterval: notifyInterval, Schema: cfg.Schema}); err != nil {
		return nil, err
	}
	s.idem, err = idempotency.New(cfg.Pool, idempotency.Config{
		// An order takes milliseconds; a request that has not answered
		// within the lease is presumed dead, and a retry takes its key over.
		HandlerTimeout: 5 * time.Second,
		Lease:          10 * time.Second,
		Logger:         cfg.Logger,
		Schema:         cfg.Schema,
		ScopeFunc:      func(r *http.Request) string { return r.Header.Get(CustomerHeader) },
	})
	if err != nil {
		return nil, err
	}
	s.relay, err = relay.New(cfg.Pool, relay.Config{
		// A relay killed mid-publish gets its rows published again by
		// another once this lease ends; consumers dedupe them.
		Lease:            3 * time.Second,
		Logger:           cfg.Logger,
		PollInterval:     200 * time.Millisecond, // NOTIFY wakes it at once; polling is the fallback
		Publisher:        cfg.Publisher,
		RetryBackoffFunc: retryBackoff,
		Schema:           cfg.Schema,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Migrate creates or upgrades the service's schema: pgbox's tables, then
// the service's own. Every process of the service may call it at start-up.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}); err != nil {
		return err
	}
	return ddl.Create(ctx, pool, schema, ordersTableSQL)
}

// Start starts the relay.
func (s *Service) Start(ctx context.Context) error { return s.relay.Start(ctx) }

// Stop stops the relay, waiting for the batch it is publishing.
func (s *Service) Stop(ctx context.Context) error { return s.relay.Stop(ctx) }

// Handler serves the API:
//
//   - POST /orders places an order (Idempotency-Key required);
//   - GET /orders/{id} shows one;
//   - POST /orders/{id}/republish publishes the order's OrderPlaced again
//     under a new message id (Idempotency-Key required): what an operator
//     does to "replay" an event by hand, which downstream services must
//     tolerate;
//   - GET /healthz.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", s.idem.WrapTx(s.placeOrder))
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	mux.Handle("POST /orders/{id}/republish", s.idem.WrapTx(s.republish))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return requireCustomer(mux)
}

// PlaceOrder is the body of POST /orders.
type PlaceOrder struct {
	// Cart is the client's own reference for what is being ordered.
	Cart string `json:"cart"`
	// Cents is the amount to charge.
	Cents int64 `json:"cents"`
	// Email is where the confirmation goes.
	Email string `json:"email"`
}

// Order is an order as the API shows it.
type Order struct {
	// Cart is the client's reference.
	Cart string `json:"cart"`
	// Cents is the amount.
	Cents int64 `json:"cents"`
	// Customer placed the order.
	Customer string `json:"customer"`
	// Email gets the confirmation.
	Email string `json:"email"`
	// ID is the order id.
	ID string `json:"id"`
	// PlacedAt is when the order was accepted.
	PlacedAt time.Time `json:"placed_at"`
}

// placeOrder writes the order and its OrderPlaced message in tx, the
// transaction that also stores this response under the request's
// Idempotency-Key. Whatever happens next (a crash before the commit, a
// client that retries ten times) the order exists once or not at all.
func (s *Service) placeOrder(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
	var req PlaceOrder
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Cart == "" || req.Cents <= 0 || !strings.Contains(req.Email, "@") {
		// A 4xx is a final answer: stored, and replayed to retries.
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "send {\"cart\": …, \"cents\": a positive amount, \"email\": …}"})
		return
	}
	o := Order{
		Cart:     req.Cart,
		Cents:    req.Cents,
		Customer: r.Header.Get(CustomerHeader),
		Email:    req.Email,
		ID:       uuid.Must(uuid.NewV7()).String(),
	}
	ctx := r.Context()
	err := tx.QueryRow(ctx, s.sql(insertOrderSQL), o.ID, o.Customer, o.Cart, o.Email, o.Cents).Scan(&o.PlacedAt)
	if err == nil {
		err = s.emitPlaced(ctx, tx, o)
	}
	if err != nil {
		// A 5xx is not stored: the transaction rolls back, the key is
		// released, and the client's retry runs this handler afresh.
		level := slog.LevelWarn
		if ctx.Err() != nil {
			level = slog.LevelInfo // the client went away (timed out, cancelled) mid-request
		}
		s.cfg.Logger.Log(ctx, level, "orders: could not place an order", slog.String("error", err.Error()))
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "try again with the same Idempotency-Key"})
		return
	}
	w.Header().Set("Location", "/orders/"+o.ID)
	writeJSON(w, http.StatusCreated, o)
}

// emitPlaced writes an OrderPlaced message for o into the outbox, in tx.
func (s *Service) emitPlaced(ctx context.Context, tx pgx.Tx, o Order) error {
	_, err := s.outbox.Write(ctx, tx, outbox.Message{
		EventType: events.TypeOrderPlaced,
		Payload: events.Encode(events.OrderPlaced{
			Cents:    o.Cents,
			Customer: o.Customer,
			Email:    o.Email,
			OrderID:  o.ID,
		}),
		Topic: events.TopicOrders,
	})
	return err
}

func (s *Service) getOrder(w http.ResponseWriter, r *http.Request) {
	o, err := s.load(r.Context(), s.cfg.Pool, r.PathValue("id"), r.Header.Get(CustomerHeader))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such order"})
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "try again"})
	default:
		writeJSON(w, http.StatusOK, o)
	}
}

// republish writes a new OrderPlaced message for an existing order: a new
// outbox row, so a new message id. The consumers' inboxes cannot recognise
// it as a duplicate (it is not one, to them); the payments service's unique
// order_id does.
func (s *Service) republish(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
	o, err := s.load(r.Context(), tx, r.PathValue("id"), r.Header.Get(CustomerHeader))
	if errors.Is(err, pgx.ErrNoRows) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such order"})
		return
	}
	if err == nil {
		err = s.emitPlaced(r.Context(), tx, o)
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": fmt.Sprintf("try again: %v", err)})
		return
	}
	writeJSON(w, http.StatusAccepted, o)
}

func (s *Service) load(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id, customer string) (Order, error) {
	o := Order{ID: id}
	if _, err := uuid.Parse(id); err != nil {
		return o, pgx.ErrNoRows
	}
	err := db.QueryRow(ctx, s.sql(selectOrderSQL), id, customer).Scan(&o.Customer, &o.Cart, &o.Email, &o.Cents, &o.PlacedAt)
	return o, err
}

// requireCustomer refuses requests that name no customer: the stand-in for
// authentication runs before the idempotency middleware, which scopes keys
// by customer.
func requireCustomer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.Header.Get(CustomerHeader) == "" {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "send " + CustomerHeader})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// retryBackoff retries a failed publish quickly, because the demo's broker
// is local: about 50ms, doubling up to a second, with jitter.
func retryBackoff(attempt int) time.Duration {
	d := min(50*time.Millisecond<<min(attempt-1, 5), time.Second)
	return d/2 + rand.N(d/2)
}

// sql renders one of the service's queries for its schema.
func (s *Service) sql(query string) string { return ddl.Render(s.cfg.Schema, query) }
