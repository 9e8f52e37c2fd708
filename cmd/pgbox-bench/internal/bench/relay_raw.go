package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox/internal/tables"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// The relay's plain-SQL ceiling: what a hand-written relay does with
// pgbox's outbox table, from a minimal pgx loop. In one transaction it
// takes the oldest due batch (rawOutboxClaim, in the relay's order, on the
// relay's pending index), publishes it, marks it published
// (rawOutboxPublished) and commits: the claim's row locks are its lease.
// pgbox's relay does more (ordering keys, the gap-safe frontier, leases that
// outlive a transaction, attempts and backoff, the outage rules, fencing,
// its memory bound); the ratio says what that costs.
const (
	rawOutboxClaim = `
SELECT o.id, o.bucket, o.topic, o.payload FROM bench_pgbox.outbox AS o
WHERE o.status = ` + tables.OutboxPending + ` AND o.available_at <= now()
ORDER BY o.available_at, o.seq LIMIT $1 FOR UPDATE SKIP LOCKED`

	rawOutboxPublished = `
UPDATE bench_pgbox.outbox AS o SET status = ` + tables.OutboxPublished + `, published_at = now()
FROM unnest($1::uuid[], $2::int[]) AS r(id, bucket)
WHERE o.id = r.id AND o.bucket = r.bucket
RETURNING o.id::text, o.payload`
)

// rawIDHeader is the header (or attribute, or field) a raw publisher sends
// each message's id in, as the consumer needs it to dedupe: the name
// Watermill's marshalers use, which the pgbox relay's messages carry too.
const rawIDHeader = "_watermill_message_uuid"

// rawMsg is an outbox row as a raw publisher sends it.
type rawMsg struct {
	id, topic string
	payload   []byte
}

// rawPublish publishes msgs, all of one batch, and returns once the broker
// has taken every one of them as durably as the pgbox relay's publisher
// waits for (an ack, a confirm, a commit). It may pipeline within the
// batch. tx is the transaction that claimed them and will mark them
// published: a broker on the same database may write in it.
type rawPublish func(ctx context.Context, tx pgx.Tx, msgs []rawMsg) error

// newRawPublisher makes a raw publisher on the case's pool, with what
// closes it.
type newRawPublisher func(ctx context.Context, pool *pgxpool.Pool) (rawPublish, func(), error)

// rawRelay publishes a pre-written outbox of n rows, as the pgbox system
// of the case writes it, with the relay's default workers and batch size,
// each worker a loop of: begin, claim a batch, publish it through the
// publisher newRaw makes, mark it published, commit. It reports rows per
// second.
func (e *env) rawRelay(n int, newRaw newRawPublisher) runFunc {
	return func(ctx context.Context, s scale) (Figures, error) {
		n := s.n(n)
		r, err := e.newRig(ctx, relay.WorkersDefault+4)
		if err != nil {
			return nil, err
		}
		defer r.close()
		out, err := outbox.New(r.pool, outbox.Config{Schema: pgboxSchemaName})
		if err != nil {
			return nil, err
		}
		if err := loadOutbox(ctx, r.pool, out, "bench", n); err != nil {
			return nil, err
		}
		if err := vacuum(ctx, r.pool, pgboxSchemaName, "outbox"); err != nil {
			return nil, err
		}
		publish, closePub, err := newRaw(ctx, r.pool)
		if err != nil {
			return nil, err
		}
		defer closePub()
		var published atomic.Int64
		cpu0 := readCPU()
		start := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		for range relay.WorkersDefault {
			g.Go(func() error { return rawWorker(gctx, r.pool, claimPublish(publish), &published, int64(n)) })
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		return cpu0.perMessage(Figures{"msgs/s": float64(n) / time.Since(start).Seconds()}, n), nil
	}
}

// claimPublish is the raw relay's claimFunc: it claims a batch of
// relay.BatchSizeDefault rows, publishes them, and returns the rows it then
// marks published (none when it claimed none).
func claimPublish(publish rawPublish) claimFunc {
	return func(ctx context.Context, tx pgx.Tx) (pgx.Rows, error) {
		rows, err := tx.Query(ctx, rawOutboxClaim, relay.BatchSizeDefault)
		if err != nil {
			return nil, err
		}
		var (
			msgs    []rawMsg
			ids     []string
			buckets []int32
		)
		for rows.Next() {
			var (
				m      rawMsg
				bucket int32
			)
			if err := rows.Scan(&m.id, &bucket, &m.topic, &m.payload); err != nil {
				rows.Close()
				return nil, err
			}
			msgs, ids, buckets = append(msgs, m), append(ids, m.id), append(buckets, bucket)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(msgs) > 0 {
			if err := publish(ctx, tx, msgs); err != nil {
				return nil, fmt.Errorf("raw publish: %w", err)
			}
		}
		return tx.Query(ctx, rawOutboxPublished, ids, buckets)
	}
}

// rawWatermill publishes a batch in one Publish call of the Watermill
// publisher newPub makes: the raw loop to the same publisher the pgbox
// system uses, where that publisher is the broker's client (GoChannel, an
// in-process broker).
func rawWatermill(newPub newPublisher) newRawPublisher {
	return func(ctx context.Context, pool *pgxpool.Pool) (rawPublish, func(), error) {
		pub, closePub, err := newPub(ctx, pool)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, _ pgx.Tx, msgs []rawMsg) error {
			wm := make([]*message.Message, len(msgs))
			for i, m := range msgs {
				wm[i] = message.NewMessage(m.id, m.payload)
				wm[i].SetContext(ctx)
			}
			return pub.Publish(msgs[0].topic, wm...)
		}, closePub, nil
	}
}
