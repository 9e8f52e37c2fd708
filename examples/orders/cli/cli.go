// Package cli is the orders example's command line: one binary, one
// subcommand per process.
//
//	orders         the orders API (HTTP, Idempotency-Key, outbox, relay)
//	payments       the payments service (subscriber, inbox, dispatcher, relay)
//	notifications  the notifications service (subscriber, inbox, dispatcher)
//	gateway        the stand-in payment gateway
//	mailsink       the stand-in mail service
//	demo           all of the above as child processes, under load and faults
//
// Every service process connects to PostgreSQL without session settings
// (its SQL names its own schema, so it runs behind PgBouncer in
// transaction pooling mode too), migrates that schema at start-up, listens on HTTP, prints
// "ready <url>" on stdout once it is serving, and shuts down gracefully on
// SIGINT or SIGTERM (or, with -exit-on-stdin-eof, when its parent goes away).
package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/examples/orders/broker"
	"github.com/pgbox/pgbox/examples/orders/demo"
	"github.com/pgbox/pgbox/examples/orders/events"
	"github.com/pgbox/pgbox/examples/orders/faults"
	"github.com/pgbox/pgbox/examples/orders/provider"
	"github.com/pgbox/pgbox/examples/orders/service/notifications"
	"github.com/pgbox/pgbox/examples/orders/service/orders"
	"github.com/pgbox/pgbox/examples/orders/service/payments"
)

const usage = `usage: orders <command> [flags]

commands:
  demo           run the whole example under load and faults, and verify it (make demo)
  orders         the orders API
  payments       the payments service
  notifications  the notifications service
  gateway        the stand-in payment gateway
  mailsink       the stand-in mail service

Run "orders <command> -h" for a command's flags.
`

// Main runs the command named by args[0] with the rest of args as its
// flags, and returns the process's exit code: 0 on success, 1 on failure
// (for demo: a failed verification), 2 on a usage error.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch name, rest := args[0], args[1:]; name {
	case "demo":
		err = runDemo(ctx, rest, stdout, stderr)
	case "orders", "payments", "notifications", "gateway", "mailsink":
		err = runService(ctx, name, rest, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "orders: unknown command %q\n\n%s", name, usage)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(parseError)):
		return 2 // the flag set has said what is wrong, and shown the flags
	case errors.As(err, new(usageError)):
		fmt.Fprintln(stderr, "orders:", err)
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "orders:", err)
		return 1
	}
	return 0
}

// usageError is a command line that parsed but cannot work.
type usageError struct{ error }

// parseError is a command line that did not parse.
type parseError struct{ error }

// parse parses args into fs, marking a failure as a parseError.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return parseError{err}
	}
	return nil
}

// serviceFlags are the flags every service process takes.
type serviceFlags struct {
	addr           string
	broker         string
	brokerNS       string
	db             string
	exitOnStdinEOF bool
	logLevel       slog.Level
	name           string
	schema         string

	// Per service.
	duplicatePublish float64
	failRate         float64
	gatewayURL       string
	lostRate         float64
	mailURL          string
	maxLatency       time.Duration
	redeliver        float64
}

func runService(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	f := serviceFlags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:0", "HTTP listen address")
	fs.StringVar(&f.db, "db", "", "PostgreSQL URL (default: $DATABASE_URL)")
	fs.BoolVar(&f.exitOnStdinEOF, "exit-on-stdin-eof", false, "shut down when stdin closes (the demo's children use it, so none outlives the demo)")
	fs.TextVar(&f.logLevel, "log-level", slog.LevelWarn, "least severe log level written to stderr")
	fs.StringVar(&f.name, "name", name, "this process's name, in logs and in pg_stat_activity")
	fs.StringVar(&f.schema, "schema", "demo_"+name, "PostgreSQL schema of this service's tables, pgbox's included")
	switch name {
	case "orders", "payments", "notifications":
		fs.StringVar(&f.broker, "broker", broker.PostgresURL, broker.Choices())
		fs.StringVar(&f.brokerNS, "broker-namespace", broker.NamespaceDefault, "the broker's schema (watermill-sql) or stream name prefix (NATS, Redis)")
	}
	switch name {
	case "orders", "payments":
		fs.Float64Var(&f.duplicatePublish, "duplicate-publish", 0, "fault: fraction of messages the relay publishes twice")
	}
	switch name {
	case "payments", "notifications":
		fs.Float64Var(&f.redeliver, "redeliver", 0, "fault: fraction of broker deliveries handed to the inbox twice")
	}
	switch name {
	case "payments":
		fs.StringVar(&f.gatewayURL, "gateway", "", "payment gateway base URL (required)")
	case "notifications":
		fs.StringVar(&f.mailURL, "mailsink", "", "mail service base URL (required)")
	case "gateway", "mailsink":
		fs.Float64Var(&f.failRate, "fail-rate", 0, "fault: fraction of requests answered 503 without being applied")
		fs.Float64Var(&f.lostRate, "lost-rate", 0, "fault: fraction of requests applied whose answer is never sent")
		fs.DurationVar(&f.maxLatency, "max-latency", 0, "each request takes a random time up to this")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	f.db = cmp.Or(f.db, os.Getenv("DATABASE_URL"))
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("%s: unexpected arguments %q", name, fs.Args())}
	case f.db == "":
		return usageError{fmt.Errorf("%s: no database: set DATABASE_URL or pass -db", name)}
	case name == "payments" && f.gatewayURL == "":
		return usageError{errors.New("payments: -gateway is required")}
	case name == "notifications" && f.mailURL == "":
		return usageError{errors.New("notifications: -mailsink is required")}
	}

	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: f.logLevel})).With("process", f.name)
	if f.exitOnStdinEOF {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	pool, err := connect(ctx, f.db, f.name)
	if err != nil {
		return err
	}
	defer pool.Close()

	svc, err := build(ctx, name, f, pool, logger)
	if err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	defer svc.close()
	return serve(ctx, f, svc, stdout, logger)
}

// service is a process's service, whatever its kind.
type service struct {
	close   func()
	handler http.Handler
	start   func(context.Context) error
	stop    func(context.Context) error
}

func build(ctx context.Context, name string, f serviceFlags, pool *pgxpool.Pool, logger *slog.Logger) (service, error) {
	svc := service{
		close: func() {},
		start: func(context.Context) error { return nil },
		stop:  func(context.Context) error { return nil },
	}
	openBroker := func() (*broker.Broker, error) {
		b, err := broker.Open(ctx, broker.Config{Logger: logger, Namespace: f.brokerNS, Pool: pool, URL: f.broker},
			events.TopicOrders, events.TopicPayments)
		if err == nil {
			svc.close = b.Close
		}
		return b, err
	}
	switch name {
	case "gateway", "mailsink":
		cfg := provider.Config{FailRate: f.failRate, Logger: logger, LostRate: f.lostRate, MaxLatency: f.maxLatency, Pool: pool, Schema: f.schema}
		if name == "gateway" {
			g := provider.NewGateway(cfg)
			svc.handler = g.Handler()
			return svc, g.Migrate(ctx)
		}
		m := provider.NewMailSink(cfg)
		svc.handler = m.Handler()
		return svc, m.Migrate(ctx)

	case "orders":
		if err := orders.Migrate(ctx, pool, f.schema); err != nil {
			return svc, err
		}
		b, err := openBroker()
		if err != nil {
			return svc, err
		}
		s, err := orders.New(orders.Config{
			Logger:    logger,
			Pool:      pool,
			Publisher: faults.NewDuplicatingPublisher(b.Publisher, f.duplicatePublish),
			Schema:    f.schema,
		})
		if err != nil {
			return svc, err
		}
		svc.handler, svc.start, svc.stop = s.Handler(), s.Start, s.Stop
		return svc, nil

	case "payments":
		if err := payments.Migrate(ctx, pool, f.schema); err != nil {
			return svc, err
		}
		b, err := openBroker()
		if err != nil {
			return svc, err
		}
		sub, err := b.Subscriber(payments.Consumer)
		if err != nil {
			return svc, err
		}
		s, err := payments.New(payments.Config{
			GatewayURL:    f.gatewayURL,
			Logger:        logger,
			Name:          f.name,
			Pool:          pool,
			Publisher:     faults.NewDuplicatingPublisher(b.Publisher, f.duplicatePublish),
			RedeliverRate: f.redeliver,
			Schema:        f.schema,
			Subscriber:    sub,
		})
		if err != nil {
			return svc, err
		}
		svc.handler, svc.start, svc.stop = s.Handler(), s.Start, s.Stop
		return svc, nil

	case "notifications":
		if err := notifications.Migrate(ctx, pool, f.schema); err != nil {
			return svc, err
		}
		b, err := openBroker()
		if err != nil {
			return svc, err
		}
		sub, err := b.Subscriber(notifications.Consumer)
		if err != nil {
			return svc, err
		}
		s, err := notifications.New(notifications.Config{
			Logger:        logger,
			MailURL:       f.mailURL,
			Name:          f.name,
			Pool:          pool,
			RedeliverRate: f.redeliver,
			Schema:        f.schema,
			Subscriber:    sub,
		})
		if err != nil {
			return svc, err
		}
		svc.handler, svc.start, svc.stop = s.Handler(), s.Start, s.Stop
		return svc, nil
	}
	return svc, fmt.Errorf("unknown service %q", name)
}

// serve starts svc, serves its HTTP handler, says "ready <url>" on stdout,
// and on ctx's end shuts it all down gracefully.
func serve(ctx context.Context, f serviceFlags, svc service, stdout io.Writer, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: svc.handler, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if err := svc.start(ctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("%s: start: %w", f.name, err)
	}
	fmt.Fprintf(stdout, "ready http://%s\n", ln.Addr())

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("%s: HTTP server: %w", f.name, err)
	}
	logger.Info("shutting down")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(srv.Shutdown(stopCtx), svc.stop(stopCtx))
}

// connect opens the process's pool, with its name in pg_stat_activity.
// application_name is its only startup parameter, one PgBouncer supports;
// no search_path, which a transaction-pooling PgBouncer refuses: the
// process's SQL names its schema instead (ddl.Render).
func connect(ctx context.Context, url, name string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	cfg.MaxConns = 16
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgbox example " + name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database unreachable: %w", err)
	}
	return pool, nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg demo.Config
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Broker, "broker", broker.PostgresURL, broker.Choices())
	fs.IntVar(&cfg.Clients, "clients", demo.ClientsDefault, "concurrent HTTP clients placing orders")
	fs.StringVar(&cfg.DatabaseURL, "db", "", "PostgreSQL URL (default: $DATABASE_URL)")
	noKill := fs.Bool("no-kill", false, "do not SIGKILL a payments process mid-run")
	fs.StringVar(&cfg.LogDir, "logs", "", "directory for the services' logs (default: a new temporary directory)")
	fs.StringVar(&cfg.Namespace, "namespace", demo.NamespaceDefault, "prefix of every schema (and NATS stream) the demo creates; they are dropped first")
	fs.IntVar(&cfg.Orders, "orders", demo.OrdersDefault, "orders to place")
	fs.StringVar(&cfg.ServicesURL, "services-db", "", "PostgreSQL URL the services connect through, such as a PgBouncer's (default: -db)")
	fs.DurationVar(&cfg.Timeout, "timeout", demo.TimeoutDefault, "give up if the run has not settled by then")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("demo: unexpected arguments %q", fs.Args())}
	}
	cfg.DatabaseURL = cmp.Or(cfg.DatabaseURL, os.Getenv("DATABASE_URL"))
	if cfg.DatabaseURL == "" {
		return usageError{errors.New("demo: no database: set DATABASE_URL (make demo starts a local PostgreSQL and sets it)")}
	}
	cfg.Kill = !*noKill
	cfg.Out = stdout
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Command = func(args ...string) *exec.Cmd { return exec.Command(self, args...) }
	_, err = demo.Run(ctx, cfg)
	return err
}
