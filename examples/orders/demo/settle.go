package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/examples/orders/broker"
	"github.com/pgbox/pgbox/examples/orders/events"
	"github.com/pgbox/pgbox/examples/orders/service/notifications"
	"github.com/pgbox/pgbox/examples/orders/service/payments"
)

// settledPolls is how many consecutive looks must find nothing to do
// before the run counts as settled.
const settledPolls = 3

// settle waits until nothing is left to do anywhere: every message is in
// exactly one of these places until it is finished, so when all are empty
// every message is finished.
//
//   - an outbox row pending or running (not yet published);
//   - the broker, not yet acknowledged by its consumer group;
//   - an inbox row pending (or in backoff) or running.
//
// Dead rows are finished too (only an operator can move them); the report
// counts them.
func (r *run) settle(ctx context.Context, brokerCfg broker.Config) error {
	b, err := broker.Open(ctx, brokerCfg)
	if err != nil {
		return err
	}
	defer b.Close()
	q := r.sql(`
		SELECT 'orders outbox',        count(*) FROM {orders}.outbox         WHERE status IN ('pending', 'running')
		UNION ALL
		SELECT 'payments inbox',       count(*) FROM {payments}.inbox        WHERE status IN ('pending', 'running')
		UNION ALL
		SELECT 'payments outbox',      count(*) FROM {payments}.outbox       WHERE status IN ('pending', 'running')
		UNION ALL
		SELECT 'notifications inbox',  count(*) FROM {notifications}.inbox   WHERE status IN ('pending', 'running')`)
	quiet := 0
	var left []string
	for quiet < settledPolls {
		left = left[:0]
		rows, err := r.pool.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("settle: %w (still busy: %s)", err, strings.Join(left, ", "))
		}
		counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			Where string
			N     int
		}])
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		for _, c := range counts {
			if c.N > 0 {
				left = append(left, fmt.Sprintf("%d in the %s", c.N, c.Where))
			}
		}
		for _, t := range []struct{ topic, group string }{
			{events.TopicOrders, payments.Consumer},
			{events.TopicPayments, notifications.Consumer},
		} {
			n, err := b.Backlog(ctx, t.topic, t.group)
			if err != nil {
				return fmt.Errorf("settle: broker backlog of %s: %w", t.topic, err)
			}
			if n > 0 {
				left = append(left, fmt.Sprintf("%d in the broker for %s", n, t.group))
			}
		}
		if len(left) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not settled in time: %s: %w", strings.Join(left, ", "), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// sql renders a query naming the run's schemas as {orders}, {payments},
// {notifications}, {gateway} and {mailsink}, each quoted.
func (r *run) sql(q string) string {
	s := r.schemas
	return strings.NewReplacer(
		"{orders}", pgx.Identifier{s.Orders}.Sanitize(),
		"{payments}", pgx.Identifier{s.Payments}.Sanitize(),
		"{notifications}", pgx.Identifier{s.Notifications}.Sanitize(),
		"{gateway}", pgx.Identifier{s.Gateway}.Sanitize(),
		"{mailsink}", pgx.Identifier{s.MailSink}.Sanitize(),
	).Replace(q)
}
