package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/examples/orders/ddl"
)

// ChargeRequest is the body of POST /v1/charges.
type ChargeRequest struct {
	// Cents is the amount to charge.
	Cents int64 `json:"cents"`
	// OrderID is the merchant's reference for the charge.
	OrderID string `json:"order_id"`
}

// Charge is a charge the gateway made: the answer to POST /v1/charges.
type Charge struct {
	// Cents is the amount charged.
	Cents int64 `json:"cents"`
	// Created is when the charge was made.
	Created time.Time `json:"created"`
	// ID is the gateway's id for the charge, "ch_…".
	ID string `json:"id"`
	// OrderID is the merchant's reference.
	OrderID string `json:"order_id"`
	// Status is "succeeded".
	Status string `json:"status"`
}

// chargesTableSQL holds one row per charge. order_id is deliberately not
// unique: like a real gateway, this one charges again for a new key, so a
// client that loses track of its keys would double-charge, and the demo
// would count it.
const chargesTableSQL = `
CREATE TABLE IF NOT EXISTS {schema}.charges (
    id              text        PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE,
    order_id        text        NOT NULL,
    cents           bigint      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
)`

const (
	insertChargeSQL = `
INSERT INTO {schema}.charges (id, idempotency_key, order_id, cents) VALUES ($1, $2, $3, $4)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, order_id, cents, created_at`

	selectChargeSQL = `SELECT id, order_id, cents, created_at FROM {schema}.charges WHERE idempotency_key = $1`
)

// Gateway is a payment gateway: POST /v1/charges charges an order once per
// idempotency key.
type Gateway struct{ s server }

// NewGateway returns a gateway storing its charges through cfg.Pool.
func NewGateway(cfg Config) *Gateway {
	return &Gateway{s: server{cfg: withDefaults(cfg), kind: "charge"}}
}

// Migrate creates the gateway's schema and tables (in Config.Schema): charges,
// and the log of requests.
func (g *Gateway) Migrate(ctx context.Context) error {
	return ddl.Create(ctx, g.s.cfg.Pool, g.s.cfg.Schema, requestsTableSQL, chargesTableSQL)
}

// Handler serves POST /v1/charges and GET /healthz.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		var req ChargeRequest
		decode := func(body []byte) (string, error) {
			if err := json.Unmarshal(body, &req); err != nil {
				return "", fmt.Errorf("body is not a charge request: %w", err)
			}
			if req.OrderID == "" || req.Cents <= 0 {
				return "", errors.New("order_id and a positive amount in cents are required")
			}
			return req.OrderID, nil
		}
		g.s.serve(w, r, decode, func(ctx context.Context, tx pgx.Tx, rec record) (result, error) {
			var c Charge
			err := tx.QueryRow(ctx, g.s.sql(insertChargeSQL), "ch_"+uuid.NewString(), rec.key, req.OrderID, req.Cents).
				Scan(&c.ID, &c.OrderID, &c.Cents, &c.Created)
			replayed := errors.Is(err, pgx.ErrNoRows)
			if replayed {
				err = tx.QueryRow(ctx, g.s.sql(selectChargeSQL), rec.key).Scan(&c.ID, &c.OrderID, &c.Cents, &c.Created)
			}
			if err != nil {
				return result{}, err
			}
			if replayed && (c.OrderID != req.OrderID || c.Cents != req.Cents) {
				return result{}, fmt.Errorf("%w: it charged %d cents for order %s", errMismatch, c.Cents, c.OrderID)
			}
			c.Status = "succeeded"
			return result{body: c, replayed: replayed}, nil
		})
	})
	return mux
}
