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

// Email is the body of POST /v1/messages.
type Email struct {
	// OrderID is the order the email is about: the sink counts emails per
	// order.
	OrderID string `json:"order_id"`
	// Subject is the subject line.
	Subject string `json:"subject"`
	// Text is the body.
	Text string `json:"text"`
	// To is the recipient's address.
	To string `json:"to"`
}

// Queued is the answer to POST /v1/messages: the email was accepted for
// delivery.
type Queued struct {
	// ID is the sink's id for the email, "msg_…".
	ID string `json:"id"`
	// Queued is when it was accepted.
	Queued time.Time `json:"queued"`
	// Status is "queued".
	Status string `json:"status"`
}

// messagesTableSQL holds one row per email sent. order_id is not unique:
// a second email for an order, under a new key, is sent, and counted.
const messagesTableSQL = `
CREATE TABLE IF NOT EXISTS {schema}.messages (
    id              text        PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE,
    order_id        text        NOT NULL,
    recipient       text        NOT NULL,
    subject         text        NOT NULL,
    queued_at       timestamptz NOT NULL DEFAULT now()
)`

const (
	insertMessageSQL = `
INSERT INTO {schema}.messages (id, idempotency_key, order_id, recipient, subject) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, queued_at`

	selectMessageSQL = `SELECT id, queued_at, order_id, recipient FROM {schema}.messages WHERE idempotency_key = $1`
)

// MailSink is a mail service: POST /v1/messages sends an email once per
// idempotency key. Nothing leaves the machine; the sink only stores what it
// would have sent.
type MailSink struct{ s server }

// NewMailSink returns a mail sink storing its messages through cfg.Pool.
func NewMailSink(cfg Config) *MailSink {
	return &MailSink{s: server{cfg: withDefaults(cfg), kind: "email"}}
}

// Migrate creates the sink's schema and tables: messages, and the log of
// requests.
func (m *MailSink) Migrate(ctx context.Context) error {
	return ddl.Create(ctx, m.s.cfg.Pool, m.s.cfg.Schema, requestsTableSQL, messagesTableSQL)
}

// Handler serves POST /v1/messages and GET /healthz.
func (m *MailSink) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		var e Email
		decode := func(body []byte) (string, error) {
			if err := json.Unmarshal(body, &e); err != nil {
				return "", fmt.Errorf("body is not an email: %w", err)
			}
			if e.To == "" || e.OrderID == "" {
				return "", errors.New("to and order_id are required")
			}
			return e.OrderID, nil
		}
		m.s.serve(w, r, decode, func(ctx context.Context, tx pgx.Tx, rec record) (result, error) {
			q := Queued{Status: "queued"}
			err := tx.QueryRow(ctx, m.s.sql(insertMessageSQL), "msg_"+uuid.NewString(), rec.key, e.OrderID, e.To, e.Subject).Scan(&q.ID, &q.Queued)
			if !errors.Is(err, pgx.ErrNoRows) {
				return result{body: q}, err
			}
			var orderID, to string
			if err := tx.QueryRow(ctx, m.s.sql(selectMessageSQL), rec.key).Scan(&q.ID, &q.Queued, &orderID, &to); err != nil {
				return result{}, err
			}
			if orderID != e.OrderID || to != e.To {
				return result{}, fmt.Errorf("%w: it sent an email about order %s to %s", errMismatch, orderID, to)
			}
			return result{body: q, replayed: true}, nil
		})
	})
	return mux
}
