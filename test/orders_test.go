package test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	ordersbroker "github.com/pgbox/pgbox/examples/orders/broker"
	"github.com/pgbox/pgbox/examples/orders/cli"
	"github.com/pgbox/pgbox/examples/orders/demo"
	"github.com/pgbox/pgbox/examples/orders/events"
	"github.com/pgbox/pgbox/internal/brokertest"
	"github.com/pgbox/pgbox/internal/natstest"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// ordersChildRole marks a re-executed test binary as one of the orders
// example's processes.
const ordersChildRole = "orders-example"

// TestOrdersProcess is not a test: it is the body of the orders example's
// processes that TestOrders starts, SIGKILLs and restarts. Its arguments,
// after "--", are the example's command line.
func TestOrdersProcess(t *testing.T) {
	if pgtest.ChildRole() != ordersChildRole {
		t.Skip("the body of the orders example's processes, started by TestOrders")
	}
	if code := cli.Main(flag.Args(), os.Stdout, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// The orders example end to end, as `make demo` runs it but smaller: three
// services and two stand-in providers in separate processes, misbehaving
// clients, duplicate deliveries injected at every hop, a payments process
// SIGKILLed with gateway calls in flight and restarted. Every order must be
// placed once, charged once by the gateway and mailed once by the mail
// service, as the providers' own tables record.
func TestOrders(t *testing.T) {
	t.Parallel()
	t.Run("WatermillSQL", func(t *testing.T) {
		t.Parallel()
		runOrders(t, ordersbroker.PostgresURL, 200)
	})
	t.Run("NATSJetStream", func(t *testing.T) {
		t.Parallel()
		runOrders(t, natstest.URL(t), 120)
	})
	t.Run("RedisStreams", func(t *testing.T) {
		t.Parallel()
		runOrders(t, brokertest.Start(t, brokertest.Redis).URL(), 120)
	})
}

func runOrders(t *testing.T, brokerURL string, orders int) {
	pool := pgtest.Pool(t)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	ns := "t_orders_" + hex.EncodeToString(suffix[:]) + "_"
	schemas := demo.SchemasFor(ns)
	t.Cleanup(func() {
		ctx := context.Background()
		for _, s := range schemas.All() {
			_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
			require.NoError(t, err)
		}
		require.NoError(t, ordersbroker.Reset(ctx, ordersbroker.Config{Namespace: schemas.Broker, Pool: pool, URL: brokerURL},
			events.TopicOrders, events.TopicPayments))
	})

	// Each process of the example is this test binary, re-executed to run
	// TestOrdersProcess with the example's command line.
	timeout := 4 * time.Minute
	childTimeout := timeout + time.Minute
	if deadline, ok := t.Deadline(); ok {
		childTimeout = time.Until(deadline) + time.Minute
	}
	command := func(args ...string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], append([]string{
			"-test.run=^TestOrdersProcess$", "-test.count=1", "-test.timeout=" + childTimeout.String(), "--",
		}, args...)...)
		cmd.Env = append(os.Environ(), "PGBOX_TEST_CHILD="+ordersChildRole)
		return cmd
	}

	report, err := demo.Run(t.Context(), demo.Config{
		Broker:      brokerURL,
		Clients:     8,
		Command:     command,
		DatabaseURL: pgtest.URL(t),
		Kill:        true,
		LogDir:      t.TempDir(),
		Namespace:   ns,
		Orders:      orders,
		Out:         t.Output(),
		Timeout:     timeout,
	})
	require.NoError(t, err)

	// The demo verified itself. Check the essentials again here, from the
	// tables alone, with queries of the test's own.
	sql := func(q string) string {
		return fmt.Sprintf(q, pgx.Identifier{schemas.Orders}.Sanitize(), pgx.Identifier{schemas.Payments}.Sanitize(),
			pgx.Identifier{schemas.Gateway}.Sanitize(), pgx.Identifier{schemas.MailSink}.Sanitize(),
			pgx.Identifier{schemas.Notifications}.Sanitize())
	}
	var placed, carts int
	require.NoError(t, pool.QueryRow(t.Context(), sql(`SELECT count(*), count(DISTINCT cart) FROM %[1]s.orders`)).Scan(&placed, &carts))
	require.Equal(t, orders, placed, "one order per cart")
	require.Equal(t, orders, carts)

	for _, effect := range []struct{ name, query string }{
		{"payment", `SELECT o.id, count(p.order_id) FROM %[1]s.orders AS o LEFT JOIN %[2]s.payments AS p
			ON p.order_id = o.id::text AND p.status = 'captured' AND p.cents = o.cents GROUP BY o.id`},
		{"charge", `SELECT o.id, count(c.id) FROM %[1]s.orders AS o LEFT JOIN %[3]s.charges AS c
			ON c.order_id = o.id::text AND c.cents = o.cents GROUP BY o.id`},
		{"email", `SELECT o.id, count(m.id) FROM %[1]s.orders AS o LEFT JOIN %[4]s.messages AS m
			ON m.order_id = o.id::text GROUP BY o.id`},
	} {
		rows, err := pool.Query(t.Context(), sql(effect.query))
		require.NoError(t, err)
		perOrder, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			ID string
			N  int
		}])
		require.NoError(t, err)
		require.Len(t, perOrder, orders)
		for _, o := range perOrder {
			require.Equal(t, 1, o.N, "order %s: %d %ss, want exactly one", o.ID, o.N, effect.name)
		}
	}
	var charges, emails, dead int
	require.NoError(t, pool.QueryRow(t.Context(), sql(`
		SELECT (SELECT count(*) FROM %[3]s.charges), (SELECT count(*) FROM %[4]s.messages),
		       (SELECT count(*) FROM %[2]s.inbox WHERE status <> 'done') + (SELECT count(*) FROM %[5]s.inbox WHERE status <> 'done')
		     + (SELECT count(*) FROM %[1]s.outbox WHERE status <> 'published') + (SELECT count(*) FROM %[2]s.outbox WHERE status <> 'published')`)).
		Scan(&charges, &emails, &dead))
	require.Equal(t, orders, charges, "no charge for anything but the orders")
	require.Equal(t, orders, emails, "no email for anything but the orders")
	require.Zero(t, dead, "every message handled and published")

	// The faults happened, and were absorbed where they should be.
	require.True(t, report.Kill.Done, "payments-1 was SIGKILLed")
	require.Positive(t, report.Client.Replayed, "retried requests were answered from the stored response")
	require.Greater(t, report.PaymentsHop.Deliveries, report.PaymentsHop.Stored, "the payments inbox absorbed duplicates")
	require.Greater(t, report.NotificationsHop.Deliveries, report.NotificationsHop.Stored, "the notifications inbox absorbed duplicates")
	require.Equal(t, report.Republished, report.IgnoredByNaturalKey, "re-published orders were absorbed by the payments table's key")
	// Every answer the gateway dropped on purpose was followed by a
	// repeat with the same key, answered from the key: no second charge.
	require.GreaterOrEqual(t, report.Gateway.Replayed, report.Gateway.Lost, "lost answers were retried with their key")
	require.GreaterOrEqual(t, report.MailSink.Replayed, report.MailSink.Lost, "lost answers were retried with their key")
}
