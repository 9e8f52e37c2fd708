// Package demo runs the orders example end to end and proves it
// effectively-once: `make demo` and the end-to-end test in test/ call Run.
//
// Run starts every service as a separate OS process (through
// Config.Command), places orders through the orders API with misbehaving
// clients, injects duplicate deliveries at every hop, SIGKILLs a payments
// process while it has gateway calls in flight and starts it again, waits
// until every broker, inbox and outbox has nothing left to do, and then
// counts, from the database alone, what each service and each stand-in
// provider recorded. It fails unless every order was placed once, paid
// once, charged once by the gateway and mailed once by the mail service.
package demo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/examples/internal/inspect"
	"github.com/pgbox/pgbox/examples/orders/broker"
	"github.com/pgbox/pgbox/examples/orders/events"
)

// Defaults.
const (
	// ClientsDefault is the default Config.Clients.
	ClientsDefault = 16
	// NamespaceDefault is the default Config.Namespace.
	NamespaceDefault = "demo_"
	// OrdersDefault is the default Config.Orders.
	OrdersDefault = 2000
	// TimeoutDefault is the default Config.Timeout.
	TimeoutDefault = 3 * time.Minute
)

// Faults injected into the services (see package faults and package
// provider). They are rates, per delivery or per request.
const (
	duplicatePublishRate = 0.03 // relays publish a message twice
	redeliverRate        = 0.03 // subscribers hand a delivery to the inbox twice
	providerFailRate     = 0.02 // gateway and mail sink answer 503
	providerLostRate     = 0.02 // gateway and mail sink apply, then drop the answer
	providerMaxLatency   = 4 * time.Millisecond
)

// ErrVerificationFailed is returned by Run when an invariant does not
// hold; the Report says which.
var ErrVerificationFailed = errors.New("verification failed")

// Config configures a run.
type Config struct {
	// Broker is "postgres" for watermill-sql on the same PostgreSQL, or a
	// broker's URL: broker.Choices says which. Defaults to "postgres".
	Broker string

	// Clients is how many HTTP clients place orders at once. Defaults to
	// ClientsDefault.
	Clients int

	// Command returns the command that runs one of the example's
	// processes: args[0] is the subcommand ("orders", "payments", …) and
	// the rest its flags, as package cli takes them. Required.
	Command func(args ...string) *exec.Cmd

	// DatabaseURL is the PostgreSQL the run prepares and verifies on, and
	// every process connects to unless ServicesURL says otherwise.
	// Required.
	DatabaseURL string

	// Kill, when true, SIGKILLs a payments process mid-run and starts it
	// again.
	Kill bool

	// LogDir receives each process's log, <name>.log. Defaults to a new
	// temporary directory, which is kept.
	LogDir string

	// Namespace prefixes every schema the run creates (<ns>orders,
	// <ns>payments, …) and the broker's resources. They are dropped at the
	// start of the run, so give each concurrent run its own. Defaults to
	// NamespaceDefault ("demo_").
	Namespace string

	// Orders is how many orders the clients place. Defaults to
	// OrdersDefault.
	Orders int

	// Out receives the progress lines and the final table. Defaults to
	// io.Discard.
	Out io.Writer

	// ServicesURL is the PostgreSQL URL the services and providers connect
	// through, such as a transaction-pooling PgBouncer's in front of
	// DatabaseURL's server (with default_query_exec_mode=cache_describe:
	// see docs/operations.md). Their dispatchers and relays then LISTEN
	// through it too, find that notifications do not arrive, say so once
	// and poll. Defaults to DatabaseURL.
	ServicesURL string

	// Timeout bounds the whole run. Defaults to TimeoutDefault.
	Timeout time.Duration
}

// Schemas names the schemas of one run.
type Schemas struct {
	// Broker holds watermill-sql's tables (with the postgres broker).
	Broker string
	// Gateway holds the stand-in payment gateway's charges and requests.
	Gateway string
	// MailSink holds the stand-in mail service's messages and requests.
	MailSink string
	// Notifications is the notifications service's.
	Notifications string
	// Orders is the orders service's.
	Orders string
	// Payments is the payments service's.
	Payments string
}

// SchemasFor returns the schemas of a run in namespace ns.
func SchemasFor(ns string) Schemas {
	return Schemas{
		Broker:        ns + "broker",
		Gateway:       ns + "gateway",
		MailSink:      ns + "mailsink",
		Notifications: ns + "notifications",
		Orders:        ns + "orders",
		Payments:      ns + "payments",
	}
}

// All returns every schema of the run.
func (s Schemas) All() []string {
	return []string{s.Orders, s.Payments, s.Notifications, s.Gateway, s.MailSink, s.Broker}
}

// run is one run's state.
type run struct {
	cfg     Config
	logDir  string
	mu      sync.Mutex // guards procs
	out     io.Writer
	pool    *pgxpool.Pool
	procs   []*proc
	schemas Schemas
	started time.Time
}

// Run runs the demo and returns its report. The error is non-nil if the
// run could not be completed, or wraps ErrVerificationFailed if an
// invariant did not hold (the report says which). Every process it started
// has exited when it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.Broker = cmp.Or(cfg.Broker, broker.PostgresURL)
	cfg.Clients = cmp.Or(cfg.Clients, ClientsDefault)
	cfg.Namespace = cmp.Or(cfg.Namespace, NamespaceDefault)
	cfg.Orders = cmp.Or(cfg.Orders, OrdersDefault)
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Command == nil || cfg.DatabaseURL == "" {
		return nil, errors.New("demo: Config.Command and Config.DatabaseURL are required")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	r := &run{cfg: cfg, out: cfg.Out, schemas: SchemasFor(cfg.Namespace), started: time.Now()}
	if r.logDir = cfg.LogDir; r.logDir == "" {
		var err error
		if r.logDir, err = os.MkdirTemp("", "pgbox-orders-demo-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		return nil, err
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("demo: database URL: %w", err)
	}
	poolCfg.ConnConfig.RuntimeParams["application_name"] = "pgbox example demo"
	if r.pool, err = pgxpool.NewWithConfig(ctx, poolCfg); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer r.pool.Close()
	defer r.killAll()

	report, err := r.run(ctx)
	if err != nil {
		return report, fmt.Errorf("demo: %w (service logs: %s)", err, r.logDir)
	}
	return report, nil
}

func (r *run) progress(format string, args ...any) {
	fmt.Fprintf(r.out, "  %5.1fs  %s\n", time.Since(r.started).Seconds(), fmt.Sprintf(format, args...))
}

// printLeftBehind prints the inboxctl commands, pasteable as printed from
// the repository's root, that show each service's inbox and outbox as the
// run left them.
func (r *run) printLeftBehind() {
	fmt.Fprintln(r.out, "\nWhat it left behind, each service's inbox and outbox, from the repository's root:")
	for _, schema := range []string{r.schemas.Orders, r.schemas.Payments, r.schemas.Notifications} {
		fmt.Fprintln(r.out, "  "+inspect.Inboxctl(r.cfg.DatabaseURL, "stats", "--schema", schema))
	}
	if note := inspect.PasswordNote(r.cfg.DatabaseURL); note != "" {
		fmt.Fprintln(r.out, "  "+note)
	}
	fmt.Fprintln(r.out, "  "+inspect.SetupNote(r.cfg.DatabaseURL))
}

func (r *run) run(ctx context.Context) (*Report, error) {
	s := r.schemas
	brokerCfg := broker.Config{Namespace: s.Broker, Pool: r.pool, URL: r.cfg.Broker}
	fmt.Fprintf(r.out, "pgbox orders demo: %d orders from %d clients; broker %s\n", r.cfg.Orders, r.cfg.Clients, r.cfg.Broker)

	// A fresh start: drop what an earlier run left.
	if err := r.pool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("database unreachable: %w", err)
	}
	for _, schema := range s.All() {
		if _, err := r.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			return nil, fmt.Errorf("drop schema %s: %w", schema, err)
		}
	}
	if err := broker.Reset(ctx, brokerCfg, events.TopicOrders, events.TopicPayments); err != nil {
		return nil, err
	}
	r.progress("dropped the schemas %s* of any earlier run", r.cfg.Namespace)

	// The outside world first: the services need its URLs.
	common := func(schema string) []string {
		return []string{"-db", cmp.Or(r.cfg.ServicesURL, r.cfg.DatabaseURL), "-schema", schema}
	}
	withBroker := func(schema string) []string {
		return append(common(schema), "-broker", r.cfg.Broker, "-broker-namespace", s.Broker)
	}
	providerFaults := []string{
		"-fail-rate", fmt.Sprint(providerFailRate), "-lost-rate", fmt.Sprint(providerLostRate),
		"-max-latency", providerMaxLatency.String(),
	}
	providers, err := r.startAll(ctx,
		spec{"gateway", append(append([]string{"gateway"}, common(s.Gateway)...), providerFaults...)},
		spec{"mailsink", append(append([]string{"mailsink"}, common(s.MailSink)...), providerFaults...)},
	)
	if err != nil {
		return nil, err
	}
	gateway, mailsink := providers[0], providers[1]
	// Each service migrates its own schema as it starts, and creates the
	// broker's topics if they are missing: they may start in any order.
	paymentsArgs := append(append([]string{"payments"}, withBroker(s.Payments)...),
		"-gateway", gateway.url, "-redeliver", fmt.Sprint(redeliverRate), "-duplicate-publish", fmt.Sprint(duplicatePublishRate))
	services, err := r.startAll(ctx,
		spec{"notifications", append(append([]string{"notifications"}, withBroker(s.Notifications)...),
			"-mailsink", mailsink.url, "-redeliver", fmt.Sprint(redeliverRate))},
		spec{"payments-1", paymentsArgs},
		spec{"payments-2", paymentsArgs},
		spec{"orders", append(append([]string{"orders"}, withBroker(s.Orders)...), "-duplicate-publish", fmt.Sprint(duplicatePublishRate))},
	)
	if err != nil {
		return nil, err
	}
	payments1, ordersSvc := services[1], services[3]
	r.progress("started gateway, mailsink, then notifications, payments-1, payments-2, orders (each migrated its own schema); logs in %s", r.logDir)

	// The load, and the SIGKILL in the middle of it.
	all := carts(r.cfg.Orders)
	load := newLoader(ordersSvc.url, r.cfg.Clients)
	defer load.close()
	killed := make(chan killResult, 1)
	killCtx, stopKiller := context.WithCancel(ctx)
	defer stopKiller()
	if r.cfg.Kill {
		go func() { killed <- r.killAndRestart(killCtx, payments1, load, len(all)) }()
	} else {
		killed <- killResult{}
	}
	load.run(ctx, all, r.cfg.Clients)
	cs := load.stats()
	r.progress("%d orders placed in %d requests (%d replayed, %d answered 409, %d cancelled by the client, %d 5xx)",
		load.placed.Load(), cs.Requests, cs.Replayed, cs.InProgress, cs.Cancelled, cs.ServerErrors)
	republished, err := load.republish(ctx, all)
	if err != nil {
		return nil, err
	}
	r.progress("re-published %d orders' OrderPlaced under new message ids, as an operator might", republished)
	kill := <-killed
	if kill.err != nil {
		return nil, kill.err
	}

	// Everything in flight finishes: relays publish, subscribers consume,
	// dispatchers handle, leases of the killed process expire and its
	// messages are handled by the others. If that does not happen in time,
	// the report still says what did.
	unsettled := r.settle(ctx, brokerCfg)
	if unsettled == nil {
		r.progress("settled: brokers consumed, every inbox and outbox drained")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()

	var stopErrs []error
	for _, p := range slices.Backward(r.procs) {
		if err := p.stop(15 * time.Second); err != nil {
			stopErrs = append(stopErrs, err)
		}
	}
	if len(stopErrs) == 0 {
		r.progress("stopped every service gracefully")
	}

	report, err := r.verify(ctx, all, load, republished, kill)
	if err != nil {
		return nil, errors.Join(err, unsettled)
	}
	if unsettled != nil {
		report.Unsettled = unsettled.Error()
	}
	report.Elapsed = time.Since(r.started)
	report.print(r.out)
	r.printLeftBehind()
	if v := report.Violations(); len(v) > 0 {
		stopErrs = append(stopErrs, fmt.Errorf("%w: %s", ErrVerificationFailed, strings.Join(v, "; ")))
	}
	return report, errors.Join(stopErrs...)
}

// killResult is what the SIGKILL did.
type killResult struct {
	err      error
	inFlight int64 // gateway calls the killed process had under way
	placed   int64 // orders placed when it was killed
	pid      int
}

// killAndRestart waits until a third of the orders are placed and the
// payments process p has gateway calls in flight, SIGKILLs it, and starts
// it again after a moment, as a supervisor would.
func (r *run) killAndRestart(ctx context.Context, p *proc, load *loader, orders int) killResult {
	for load.placed.Load() < int64(orders/3) {
		select {
		case <-ctx.Done():
			return killResult{err: ctx.Err()}
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Aim for a moment with gateway calls in flight; after three seconds
	// of trying, kill anyway.
	var inFlight int64
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		if inFlight = chargesInFlight(ctx, p.url); inFlight > 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	res := killResult{inFlight: inFlight, placed: load.placed.Load(), pid: p.pid()}
	p.kill()
	r.progress("SIGKILL payments-1 (pid %d) with %d gateway calls in flight, %d orders placed", res.pid, inFlight, res.placed)
	time.Sleep(500 * time.Millisecond)
	np, err := r.restart(ctx, p)
	if err != nil {
		res.err = fmt.Errorf("restart payments-1: %w", err)
		return res
	}
	r.progress("restarted payments-1 (pid %d)", np.pid())
	return res
}

// chargesInFlight asks a payments process how many gateway calls it has
// under way.
func chargesInFlight(ctx context.Context, url string) int64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/stats", nil)
	if err != nil {
		return 0
	}
	req.Close = true // keep no idle connection to a process about to be killed
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var stats struct {
		ChargesInFlight int64 `json:"charges_in_flight"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&stats)
	return stats.ChargesInFlight
}

// killAll kills whatever is still running: on an error, or a cancelled run.
func (r *run) killAll() {
	for _, p := range r.procs {
		select {
		case <-p.done:
		default:
			p.kill()
		}
	}
}
