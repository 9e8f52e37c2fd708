// Command observability runs pgbox with its metrics, traces, health check
// and maintenance wired the way a service would wire them, and serves them
// over HTTP:
//
//	/metrics   Prometheus exposition of pgbox's OpenTelemetry metrics
//	/healthz   health.Checker: 200 or 503 with a JSON report
//
// A producer writes orders through the outbox in a traced request, the
// relay publishes them to an in-process Watermill broker (gochannel), the
// consumer stores them in its inbox (each delivered twice, so duplicates
// show) and a dispatcher handles them, one poison order failing until it is
// dead. The Prometheus exporter lives here, in the example, not in pgbox:
// pgbox only speaks the OpenTelemetry API.
//
//	go run ./examples/observability            # serve until Ctrl-C
//	go run ./examples/observability -once      # print pgbox's metrics and exit
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/maintenance"
	"github.com/pgbox/pgbox/migrations"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/pgboxtest"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillinbox"
)

func main() {
	var (
		addr   = flag.String("addr", "127.0.0.1:9464", "where to serve /metrics and /healthz")
		once   = flag.Bool("once", false, "print pgbox's metrics once the orders are handled, and exit")
		orders = flag.Int("orders", 20, "orders to place")
		schema = flag.String("schema", "pgbox_observability", "schema to (re)create for the run")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL"), *addr, *orders, *schema, *once, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, addr string, orders int, schema string, once bool, out io.Writer) error {
	if url == "" {
		return errors.New("DATABASE_URL is not set: run `make pg-up` and export its URL")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident.Quote(schema)+" CASCADE"); err != nil {
		return err
	}
	if err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}); err != nil {
		return err
	}

	// OpenTelemetry: metrics to a Prometheus registry of our own, spans to a
	// provider that keeps none (a real service would export them, to an
	// OTLP collector say).
	registry := promclient.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer meters.Shutdown(context.WithoutCancel(ctx))
	tracers := sdktrace.NewTracerProvider()
	defer tracers.Shutdown(context.WithoutCancel(ctx))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	// The broker, in process.
	broker := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024}, watermill.NewSlogLogger(logger))
	defer broker.Close()
	deliveries, err := broker.Subscribe(ctx, "orders")
	if err != nil {
		return err
	}

	// The producer's side: the outbox and a relay.
	box, err := outbox.New(pool, outbox.Config{Schema: schema})
	if err != nil {
		return err
	}
	// GoChannel takes a Publish call all or none (it fails only once
	// closed, before it sends anything): a batch's rows go in one call.
	r, err := relay.New(pool, relay.Config{AtomicPublisher: true, Logger: logger, MeterProvider: meters, Publisher: broker, Schema: schema,
		TracerProvider: tracers})
	if err != nil {
		return err
	}

	// The consumer's side: the inbox, fed by the subscription (every message
	// twice), and a dispatcher.
	payments, err := inbox.New(pool, inbox.Config{Consumer: "payments", MaxAttempts: 3, MeterProvider: meters, Schema: schema})
	if err != nil {
		return err
	}
	store := watermillinbox.Handler(watermillinbox.Config{Inbox: payments, Logger: logger})
	go func() {
		for m := range deliveries {
			for range 2 {
				if err := store(m); err != nil {
					logger.Error("store", slog.String("error", err.Error()))
				}
			}
			m.Ack()
		}
	}()
	d, err := dispatcher.New(pool, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{
			"OrderPlaced": dispatcher.InTx(func(ctx context.Context, _ pgx.Tx, m *dispatcher.Message) error {
				if strings.Contains(string(m.Payload), "poison") {
					return errors.New("payload is not an order")
				}
				return nil
			}),
		},
		Inbox:            payments,
		Logger:           logger,
		MeterProvider:    meters,
		RetryBackoffFunc: func(int) time.Duration { return 50 * time.Millisecond },
		TracerProvider:   tracers,
	})
	if err != nil {
		return err
	}
	m, err := maintenance.New(pool, maintenance.Config{Logger: logger, MeterProvider: meters, Schema: schema})
	if err != nil {
		return err
	}
	for _, start := range []func(context.Context) error{r.Start, d.Start, m.Start} {
		if err := start(ctx); err != nil {
			return err
		}
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = errors.Join(m.Stop(stopCtx), d.Stop(stopCtx), r.Stop(stopCtx))
	}()

	checker, err := health.New(pool, health.Config{
		Dispatchers: []*dispatcher.Dispatcher{d}, Maintainer: m, Relays: []*relay.Relay{r}, Schema: schema,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.Handle("GET /healthz", checker)
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = server.Serve(listener) }()
	defer server.Close()
	base := "http://" + listener.Addr().String()
	fmt.Fprintf(out, "serving %s/metrics and %s/healthz\n", base, base)

	// Place the orders in one traced request; one of them is poison.
	reqCtx, span := tracers.Tracer("checkout").Start(ctx, "POST /checkout")
	tx, err := pool.Begin(reqCtx)
	if err != nil {
		return err
	}
	for i := 1; i <= orders; i++ {
		payload := fmt.Sprintf(`{"order":%d}`, i)
		if i == orders {
			payload = `"poison"`
		}
		if _, err := box.Write(reqCtx, tx, outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: []byte(payload)}); err != nil {
			_ = tx.Rollback(reqCtx)
			return err
		}
	}
	if err := tx.Commit(reqCtx); err != nil {
		return err
	}
	span.End()

	if !once {
		<-ctx.Done()
		return nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := waitHandled(waitCtx, pool, schema, orders); err != nil {
		return err
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		if err := show(ctx, base+path, out); err != nil {
			return err
		}
	}
	return nil
}

// waitHandled waits until every order is in the inbox and nothing is left
// to do.
func waitHandled(ctx context.Context, pool *pgxpool.Pool, schema string, orders int) error {
	for {
		var n int
		err := pool.QueryRow(ctx, ident.Render("SELECT count(*) FROM /* schema */inbox WHERE status IN ('done', 'dead')", schema)).Scan(&n)
		if err != nil {
			return err
		}
		if n == orders {
			return pgboxtest.WaitDrained(ctx, pool, schema)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d orders handled: %w", n, orders, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// show prints what url serves: for /metrics, pgbox's lines only.
func show(ctx context.Context, url string, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fmt.Fprintf(out, "\nGET %s: %s\n", url, resp.Status)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(url, "/metrics") && !strings.HasPrefix(line, "pgbox_") {
			continue
		}
		fmt.Fprintln(out, line)
	}
	return sc.Err()
}

// The gochannel publisher satisfies the relay's message.Publisher.
var _ message.Publisher = (*gochannel.GoChannel)(nil)
