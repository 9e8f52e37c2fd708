// Package payments is the payments service: it charges every order placed,
// once.
//
// OrderPlaced messages arrive from the broker. A Watermill subscription
// stores each delivery in the service's inbox (watermillinbox), which keeps
// one copy per message id, and a pgbox dispatcher handles them in two steps:
//
//  1. OrderPlaced, in the transaction that marks the message done
//     (dispatcher.InTx): record the payment (its primary key is the order
//     id, a second guard against the same order arriving under another
//     message id) and enqueue a ChargeRequested message into this same inbox
//     (inbox.ReceiveTx). The payment and the request to charge it commit
//     together, exactly once.
//  2. ChargeRequested, under a lease (dispatcher.Leased): call the payment
//     gateway with the message's idempotency key, then, in one
//     transaction, mark the payment captured and write PaymentCaptured to
//     the outbox, guarded by the payment's status so that a repeat writes
//     nothing. A relay publishes it.
//
// Why two steps: a call to the outside world cannot be part of a database
// transaction. If the gateway were called from the OrderPlaced handler, a
// crash after the call but before the commit would roll the payment back
// and charge again on the retry, with nothing to tell the gateway it is a
// retry. Under a lease, the call is at least once, and the idempotency key,
// the same on every attempt in every process, makes the gateway apply it
// once.
package payments

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
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
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillinbox"
)

// Consumer is the service's consumer name in its inbox.
const Consumer = "payments"

// notifyInterval is how often, at most, this process's inbox and outbox
// wake idle workers with a NOTIFY. Every transaction that notifies holds
// PostgreSQL's single notification lock from its commit until its WAL is
// flushed, so several busy processes notifying every 10ms (the default)
// make the whole database's commits queue on that lock. One wake-up per
// 100ms is plenty; polling finds anything one missed.
const notifyInterval = 100 * time.Millisecond

// Config configures the service.
type Config struct {
	// GatewayURL is the payment gateway's base URL. Required.
	GatewayURL string

	// Logger receives the service's logs. Defaults to slog.Default().
	Logger *slog.Logger

	// Name names this process, in logs, in the gateway's request log (as
	// its User-Agent) and in the delivery log: "payments-1".
	Name string

	// Pool connects to PostgreSQL. The service's SQL names Schema, so the
	// pool needs no search_path (nor any other session setting). Required.
	Pool *pgxpool.Pool

	// Publisher is where the relay publishes PaymentCaptured: the broker.
	// Required.
	Publisher message.Publisher

	// RedeliverRate is the fraction of broker deliveries handed to the
	// inbox twice (faults.Redeliver), to show that the inbox absorbs them.
	RedeliverRate float64

	// Schema holds the service's tables and pgbox's. Required.
	Schema string

	// Subscriber delivers OrderPlaced from the broker: a subscriber in the
	// consumer group "payments", shared by every payments process.
	// Required.
	Subscriber message.Subscriber
}

// Service is the payments service. Create it with New, then Start and
// Stop it.
type Service struct {
	cfg        Config
	deliveries *faults.DeliveryLog
	dispatcher *dispatcher.Dispatcher
	gateway    *gatewayClient
	inbox      *inbox.Inbox
	outbox     *outbox.Outbox
	relay      *relay.Relay
	router     *message.Router
	stats      stats

	stopRouter func() error // set by Start
}

// stats counts what this process did since it started, for GET /stats.
// The demo reads it to SIGKILL a payments process at a moment when it has
// gateway calls in flight.
type stats struct {
	chargesInFlight atomic.Int64 // gateway calls under way
	charged         atomic.Int64 // charges the gateway confirmed
}

// New returns the service. It does not touch the database.
func New(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg, gateway: newGatewayClient(cfg.GatewayURL, cfg.Name)}
	var err error
	if s.inbox, err = inbox.New(cfg.Pool, inbox.Config{Consumer: Consumer, MaxAttempts: 10, NotifyInterval: notifyInterval, Schema: cfg.Schema}); err != nil {
		return nil, err
	}
	if s.outbox, err = outbox.New(cfg.Pool, outbox.Config{NotifyInterval: notifyInterval, Schema: cfg.Schema}); err != nil {
		return nil, err
	}
	s.dispatcher, err = dispatcher.New(cfg.Pool, dispatcher.Config{
		BatchSize: 16,
		Handlers: map[string]dispatcher.Handler{
			events.TypeOrderPlaced:     dispatcher.InTx(s.handleOrderPlaced),
			events.TypeChargeRequested: dispatcher.Leased(s.handleChargeRequested),
		},
		// A gateway call that takes 2s has failed; a SIGKILLed worker's
		// messages are claimed again 3s after its last heartbeat.
		HandlerTimeout:   2 * time.Second,
		Inbox:            s.inbox,
		Lease:            3 * time.Second,
		Logger:           cfg.Logger,
		PollInterval:     200 * time.Millisecond, // NOTIFY wakes workers at once; polling finds expired leases
		RetryBackoffFunc: retryBackoff,
		Workers:          4,
	})
	if err != nil {
		return nil, err
	}
	s.relay, err = relay.New(cfg.Pool, relay.Config{
		Lease:            3 * time.Second,
		Logger:           cfg.Logger,
		PollInterval:     200 * time.Millisecond,
		Publisher:        cfg.Publisher,
		RetryBackoffFunc: retryBackoff,
		Schema:           cfg.Schema,
	})
	if err != nil {
		return nil, err
	}

	// The broker side: store every delivery in the inbox, then ack. A
	// duplicate is recognised and acked too; a database error nacks, and
	// the broker delivers again.
	s.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NewSlogLogger(cfg.Logger))
	if err != nil {
		return nil, err
	}
	store := watermillinbox.Handler(watermillinbox.Config{Inbox: s.inbox, Logger: cfg.Logger})
	if s.deliveries, err = faults.NewDeliveryLog(context.Background(), cfg.Pool.Config(), cfg.Schema, cfg.Name); err != nil {
		return nil, err
	}
	store = s.deliveries.Wrap(store)                   // demo instrumentation
	store = faults.Redeliver(cfg.RedeliverRate, store) // demo fault injection
	s.router.AddConsumerHandler("payments-inbox", events.TopicOrders, cfg.Subscriber, store)
	return s, nil
}

// Migrate creates or upgrades the service's schema: pgbox's tables, then
// the service's own. Every process of the service may call it at start-up.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}); err != nil {
		return err
	}
	return ddl.Create(ctx, pool, schema, paymentsTableSQL, ignoredTableSQL, faults.DeliveriesTableSQL)
}

// Start starts the dispatcher, the relay and the subscription, and returns
// once messages flow.
func (s *Service) Start(ctx context.Context) error {
	if err := s.dispatcher.Start(ctx); err != nil {
		return err
	}
	if err := s.relay.Start(ctx); err != nil {
		return err
	}
	stop, err := broker.Run(ctx, "payments", s.router)
	if err != nil {
		return err
	}
	s.stopRouter = stop
	return nil
}

// Stop stops taking deliveries, then drains the dispatcher and the relay.
// Messages in flight that do not finish by ctx's deadline go back to
// pending; nothing is lost.
func (s *Service) Stop(ctx context.Context) error {
	var errs []error
	if s.stopRouter != nil {
		errs = append(errs, s.stopRouter())
	}
	errs = append(errs, s.dispatcher.Stop(ctx), s.relay.Stop(ctx))
	s.deliveries.Close()
	return errors.Join(errs...)
}

// Handler serves GET /healthz, and GET /stats: this process's gateway calls
// in flight and charges confirmed, as JSON.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{
			"charges_in_flight": s.stats.chargesInFlight.Load(),
			"charged":           s.stats.charged.Load(),
		})
	})
	return mux
}

// retryBackoff retries quickly, because the demo's gateway fails on purpose
// and recovers at once: about 50ms, doubling up to a second, with jitter.
// (dispatcher.DefaultRetryBackoff starts at a second and grows to an hour.)
func retryBackoff(attempt int) time.Duration {
	d := min(50*time.Millisecond<<min(attempt-1, 5), time.Second)
	return d/2 + rand.N(d/2)
}

// sql renders one of the service's queries for its schema.
func (s *Service) sql(query string) string { return ddl.Render(s.cfg.Schema, query) }
