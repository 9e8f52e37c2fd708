// Package outboxdrain waits for relays to drain an outbox, for the
// benchmarks that time them.
package outboxdrain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

const (
	// minLook and maxLook bound the time between two looks.
	minLook = 2 * time.Millisecond
	maxLook = 100 * time.Millisecond
	// stallAfter is how long the relay may publish nothing, with the next
	// row to publish failing, before Wait gives up on the drain.
	stallAfter = time.Minute
)

// Wait waits until the outbox of schema has no row left to publish
// (pending, or running as relays before schema version 12 marked them),
// or until ctx ends.
//
// A drain that cannot end is an error, with the relay's: a row dead, or
// the next row to publish failing while nothing was published for
// stallAfter (a publisher that cannot take the case's messages, such as
// watermill-sql's own in pgx's exec mode, would otherwise have Wait wait
// until ctx ends, the relay's retries behind it). A row that fails and is
// retried while others are published is waited for. A drain with a dead
// row is not done: its figure would count a message never published.
//
// A relay publishes rows in the pending index's order, so each look starts
// at the row the last one found: read from the index's start, every look
// would pass the dead entries of every row published so far, database CPU
// that grows with the drain and that the plain loops a relay is compared
// with (which count their own rows) never spend. A last look from the
// start makes sure.
//
// Each look is a query the server runs beside the relays it times, so it
// looks as seldom as the drain allows: the next look comes when, at the
// pace since the last one, about half of what is left should be done
// (what is left: up to the last row pending when Wait began, by seq),
// between 2 and 100 milliseconds later. At a steady pace Wait sees a
// drain's end within 2 ms of it; a drain that speeds up may end a few
// milliseconds more before Wait looks.
func Wait(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return wait(ctx, pool, schema, stallAfter)
}

// wait is Wait with the stall it gives up after.
func wait(ctx context.Context, pool *pgxpool.Pool, schema string, stallAfter time.Duration) error {
	next := ident.Render(`SELECT available_at, seq, attempts, coalesce(last_error, '') FROM /* schema */outbox
WHERE status = `+tables.OutboxPending+` AND (available_at, seq) >= ($1, $2) ORDER BY available_at, seq LIMIT 1`, schema)
	dead := ident.Render(`SELECT seq, attempts, coalesce(last_error, '') FROM /* schema */outbox
WHERE status = `+tables.OutboxDead+` ORDER BY seq LIMIT 1`, schema)
	last := ident.Render(`SELECT coalesce(max(seq), 0), now() FROM (SELECT seq FROM /* schema */outbox
WHERE status = `+tables.OutboxPending+` ORDER BY available_at DESC, seq DESC LIMIT 1) AS l`, schema)
	// Whether nothing was published for $2 ms, since $1 at least (the
	// published index's last entry: one probe).
	stalled := ident.Render(`SELECT now() - coalesce(max(published_at), $1) > $2 * interval '1 millisecond'
FROM /* schema */outbox WHERE status = `+tables.OutboxPublished, schema)
	left := ident.Render(`SELECT EXISTS (SELECT 1 FROM /* schema */outbox WHERE status IN (`+tables.OutboxPending+`, `+tables.OutboxRunning+`))`, schema)
	var end int64
	var began time.Time
	if err := pool.QueryRow(ctx, last).Scan(&end, &began); err != nil {
		return err
	}
	at, seq := time.Time{}, int64(0)
	var pace paceOf
	for {
		var attempts int
		var lastErr string
		err := pool.QueryRow(ctx, next, at, seq).Scan(&at, &seq, &attempts, &lastErr)
		if err == nil && lastErr != "" {
			var stuck bool
			if err := pool.QueryRow(ctx, stalled, began, stallAfter.Milliseconds()).Scan(&stuck); err != nil {
				return err
			}
			if stuck {
				return fmt.Errorf("outboxdrain: the relay has published nothing for %s, and the next outbox row, %d, failed %d times: %s",
					stallAfter, seq, attempts, lastErr)
			}
		}
		if errors.Is(err, pgx.ErrNoRows) {
			var waiting bool
			if err := pool.QueryRow(ctx, left).Scan(&waiting); err != nil {
				return err
			}
			if !waiting {
				return deadRow(ctx, pool, dead)
			}
			at, seq = time.Time{}, 0 // a row pending behind the last found: look from the start
			pace = paceOf{}
		} else if err != nil {
			return err
		}
		timer := time.NewTimer(pace.next(seq, end, time.Now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// deadRow returns an error naming the first dead row of the outbox, and
// the relay's last error on it, or nil if none is dead.
func deadRow(ctx context.Context, pool *pgxpool.Pool, dead string) error {
	var seq int64
	var attempts int
	var lastErr string
	err := pool.QueryRow(ctx, dead).Scan(&seq, &attempts, &lastErr)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("outboxdrain: outbox row %d is dead after %d attempts, never published: %s", seq, attempts, lastErr)
}

// paceOf is how fast the drain went between the last two looks.
type paceOf struct {
	seq int64     // the row the last look found, by seq
	at  time.Time // when; zero before the first look
}

// next returns how long to wait for the next look, now that a look found
// the row seq pending, with end the last.
func (p *paceOf) next(seq, end int64, now time.Time) time.Duration {
	wait := minLook
	if !p.at.IsZero() && seq > p.seq && end > seq {
		perRow := now.Sub(p.at) / time.Duration(seq-p.seq)
		wait = min(max(perRow*time.Duration(end-seq)/2, minLook), maxLook)
	}
	p.seq, p.at = seq, now
	return wait
}
