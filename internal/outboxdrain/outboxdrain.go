// Package outboxdrain waits for relays to drain an outbox, for the
// benchmarks that time them.
package outboxdrain

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

// Wait waits until the outbox of schema has no row left to publish
// (pending, or running as relays before schema version 12 marked them),
// looking every 2 milliseconds, or until ctx ends.
//
// A relay publishes rows in the pending index's order, so each look starts
// at the row the last one found: read from the index's start, every look
// would pass the dead entries of every row published so far, database CPU
// that grows with the drain and that the plain loops a relay is compared
// with (which count their own rows) never spend. A last look from the
// start makes sure.
func Wait(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	next := ident.Render(`SELECT available_at, seq FROM /* schema */outbox
WHERE status = `+tables.OutboxPending+` AND (available_at, seq) >= ($1, $2) ORDER BY available_at, seq LIMIT 1`, schema)
	left := ident.Render(`SELECT EXISTS (SELECT 1 FROM /* schema */outbox WHERE status IN (`+tables.OutboxPending+`, `+tables.OutboxRunning+`))`, schema)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	at, seq := time.Time{}, int64(0)
	for {
		err := pool.QueryRow(ctx, next, at, seq).Scan(&at, &seq)
		if errors.Is(err, pgx.ErrNoRows) {
			var waiting bool
			if err := pool.QueryRow(ctx, left).Scan(&waiting); err != nil || !waiting {
				return err
			}
			at, seq = time.Time{}, 0 // a row pending behind the last found: look from the start
		} else if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
