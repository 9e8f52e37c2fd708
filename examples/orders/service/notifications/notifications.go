// Package notifications is the notifications service: it emails a
// confirmation for every payment captured, once.
//
// PaymentCaptured messages arrive from the broker and are stored in the
// service's inbox (watermillinbox). A pgbox dispatcher hands each to a
// leased handler (dispatcher.Leased) that posts the email to the mail
// service with the message's idempotency key. If the process dies during the
// call, the message is claimed again when its lease expires and the mail
// service sees the same key, so the customer gets one email, not two.
package notifications

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/examples/orders/broker"
	"github.com/pgbox/pgbox/examples/orders/ddl"
	"github.com/pgbox/pgbox/examples/orders/events"
	"github.com/pgbox/pgbox/examples/orders/faults"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/migrations"
	"github.com/pgbox/pgbox/watermillinbox"
)

// Consumer is the service's consumer name in its inbox.
const Consumer = "notifications"

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

	// MailURL is the mail service's base URL. Required.
	MailURL string

	// Name names this process, in logs, in the mail service's request log
	// and in the delivery log.
	Name string

	// Pool connects to PostgreSQL. The service's SQL names Schema, so the
	// pool needs no search_path (nor any other session setting). Required.
	Pool *pgxpool.Pool

	// RedeliverRate is the fraction of broker deliveries handed to the
	// inbox twice (faults.Redeliver), to show that the inbox absorbs them.
	RedeliverRate float64

	// Schema holds the service's tables and pgbox's. Required.
	Schema string

	// Subscriber delivers PaymentCaptured from the broker: a subscriber in
	// the consumer group "notifications". Required.
	Subscriber message.Subscriber
}

// Service is the notifications service. Create it with New, then Start and
// Stop it.
type Service struct {
	cfg        Config
	deliveries *faults.DeliveryLog
	dispatcher *dispatcher.Dispatcher
	mail       *mailClient
	router     *message.Router

	stopRouter func() error // set by Start
}

// New returns the service. It does not touch the database.
func New(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg, mail: newMailClient(cfg.MailURL, cfg.Name)}
	in, err := inbox.New(cfg.Pool, inbox.Config{Consumer: Consumer, MaxAttempts: 10, NotifyInterval: notifyInterval, Schema: cfg.Schema})
	if err != nil {
		return nil, err
	}
	s.dispatcher, err = dispatcher.New(cfg.Pool, dispatcher.Config{
		BatchSize: 16,
		Handlers: map[string]dispatcher.Handler{
			events.TypePaymentCaptured: dispatcher.Leased(s.handlePaymentCaptured),
		},
		HandlerTimeout:   2 * time.Second,
		Inbox:            in,
		Lease:            3 * time.Second,
		Logger:           cfg.Logger,
		PollInterval:     200 * time.Millisecond,
		RetryBackoffFunc: retryBackoff,
		Workers:          4,
	})
	if err != nil {
		return nil, err
	}
	s.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NewSlogLogger(cfg.Logger))
	if err != nil {
		return nil, err
	}
	store := watermillinbox.Handler(watermillinbox.Config{Inbox: in, Logger: cfg.Logger})
	if s.deliveries, err = faults.NewDeliveryLog(context.Background(), cfg.Pool.Config(), cfg.Schema, cfg.Name); err != nil {
		return nil, err
	}
	store = s.deliveries.Wrap(store)                   // demo instrumentation
	store = faults.Redeliver(cfg.RedeliverRate, store) // demo fault injection
	s.router.AddConsumerHandler("notifications-inbox", events.TopicPayments, cfg.Subscriber, store)
	return s, nil
}

// Migrate creates or upgrades the service's schema: pgbox's tables, then
// the service's own.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}); err != nil {
		return err
	}
	return ddl.Create(ctx, pool, schema, emailsTableSQL, faults.DeliveriesTableSQL)
}

// Start starts the dispatcher and the subscription, and returns once
// messages flow.
func (s *Service) Start(ctx context.Context) error {
	if err := s.dispatcher.Start(ctx); err != nil {
		return err
	}
	stop, err := broker.Run(ctx, "notifications", s.router)
	if err != nil {
		return err
	}
	s.stopRouter = stop
	return nil
}

// Stop stops taking deliveries, then drains the dispatcher.
func (s *Service) Stop(ctx context.Context) error {
	var errs []error
	if s.stopRouter != nil {
		errs = append(errs, s.stopRouter())
	}
	errs = append(errs, s.dispatcher.Stop(ctx))
	s.deliveries.Close()
	return errors.Join(errs...)
}

// Handler serves GET /healthz.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return mux
}

// handlePaymentCaptured emails the confirmation. The idempotency key is
// the same on every attempt, in every process, so a repeat after a crash is
// recognised by the mail service.
func (s *Service) handlePaymentCaptured(ctx context.Context, m *dispatcher.Message) error {
	p, err := events.Decode[events.PaymentCaptured](m.Payload)
	if err != nil {
		return dispatcher.Permanent(err)
	}
	id, err := s.mail.send(ctx, m.IdempotencyKey(), p)
	if err != nil {
		return err // retried with the same key
	}
	// Keep our own record of what was sent, for support staff. Should this
	// fail, the retry sends again with the same key: the mail service
	// answers with the same id, and no second email goes out.
	_, err = s.cfg.Pool.Exec(ctx, s.sql(insertEmailSQL), p.OrderID, m.ID, id)
	return err
}

// retryBackoff retries quickly: about 50ms, doubling up to a second, with
// jitter.
func retryBackoff(attempt int) time.Duration {
	d := min(50*time.Millisecond<<min(attempt-1, 5), time.Second)
	return d/2 + rand.N(d/2)
}

// sql renders one of the service's queries for its schema.
func (s *Service) sql(query string) string { return ddl.Render(s.cfg.Schema, query) }
