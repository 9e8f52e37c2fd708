package bench

import (
	"context"
	"errors"
	"math"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// The tables case's SQL. Its two-table layout, measured against pgbox's one
// inbox table, keeps the dedupe memory in one table and the pending work in
// another. It keeps the one table's guarantees (a message is stored once
// per id, with its payload hash for conflict detection, and its completion
// commits with the handler's transaction) without its history columns: a
// done message leaves the queue and only its dedupe row stays.
const (
	twoTablesCreate = `
CREATE TABLE bench_pgbox.dedupe (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    payload_hash bytea       NOT NULL,
    PRIMARY KEY (consumer, message_id)
);
CREATE TABLE bench_pgbox.queue (
    seq          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    event_type   text        NOT NULL,
    payload      bytea       NOT NULL,
    attempts     integer     NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now()
);
-- Claim order, as inbox_pending_idx is for the one table; every row here
-- is pending, so it needs no predicate.
CREATE INDEX queue_claim_idx ON bench_pgbox.queue (consumer, available_at, seq)`

	// twoTablesInsertMany takes rawInsertMany's arguments: only the ids
	// the dedupe table did not hold yet reach the queue, in one statement.
	twoTablesInsertMany = `
WITH m AS (
    SELECT * FROM unnest($2::text[], $3::bytea[], $4::bytea[]) AS m(id, payload, hash)
), s AS (
    INSERT INTO bench_pgbox.dedupe (consumer, message_id, payload_hash)
    SELECT $1, m.id, m.hash FROM m
    ON CONFLICT DO NOTHING
    RETURNING message_id
)
INSERT INTO bench_pgbox.queue (consumer, message_id, event_type, payload)
SELECT $1, s.message_id, 'noop', m.payload FROM s JOIN m ON m.id = s.message_id`

	// twoTablesClaimDelete claims a batch and completes it in one
	// statement, as rawClaimDone does: done is gone from the queue. The
	// batch is an array, not `seq IN (SELECT …)`: with 20,000 rows queued
	// and analyzed, the planner hash-joined the IN subquery against a
	// sequential scan of the whole queue. ARRAY(…) runs the claim once, as
	// an InitPlan, and deletes its rows through queue_pkey.
	twoTablesClaimDelete = `
DELETE FROM bench_pgbox.queue
WHERE seq = ANY (ARRAY(SELECT seq FROM bench_pgbox.queue
                       WHERE consumer = $1 AND available_at <= now()
                       ORDER BY available_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED))
RETURNING message_id, payload`

	// The retained memory, messages h1…h$2 handled long ago: in the one
	// table done rows, with their payload; in two tables dedupe rows.
	oneTableHistory = `
INSERT INTO bench_pgbox.inbox (consumer, message_id, event_type, status, attempts, max_attempts, processed_at, claim_token, payload, payload_hash, bucket)
SELECT $1, 'h' || i, 'noop', 'done', 1, 25, now(), i, $3, $4, 0 FROM generate_series(1, $2::int) AS i`
	twoTablesHistory = `
INSERT INTO bench_pgbox.dedupe (consumer, message_id, payload_hash)
SELECT $1, 'h' || i, $3 FROM generate_series(1, $2::int) AS i`

	// tablesSize is the bytes on disk of the bench schema's tables named
	// $1, their indexes and TOAST included.
	tablesSize = `
SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c
WHERE c.relnamespace = 'bench_pgbox'::regnamespace AND c.relname = ANY($1)`
)

// tableShape is one layout of the inbox in the tables case: how it is
// made and given its history, and the statements its producers and
// workers loop on.
type tableShape struct {
	// setup makes the shape's tables in the rig's fresh schema and stores
	// history done messages in them.
	setup func(ctx context.Context, pool *pgxpool.Pool, history int) error
	// insertMany stores new messages; it takes rawInsertMany's arguments.
	insertMany string
	// claim is the workers' claim, which completes the batch it takes.
	claim claimFunc
	// tables are the tables the shape keeps its messages in.
	tables []string
}

// oneTable is pgbox's inbox as migrated: the dedupe memory and the work
// queue in one table, worked by the plain-SQL ceiling's statements.
var oneTable = tableShape{
	setup: func(ctx context.Context, pool *pgxpool.Pool, history int) error {
		if _, err := pool.Exec(ctx, oneTableHistory, consumer, history, benchPayload, payloadHash()); err != nil {
			return err
		}
		return vacuum(ctx, pool, pgboxSchemaName, "inbox")
	},
	insertMany: rawInsertMany,
	claim:      claimDone,
	tables:     []string{"inbox"},
}

// twoTables is the dedupe memory and the work queue in tables of their own.
var twoTables = tableShape{
	setup: func(ctx context.Context, pool *pgxpool.Pool, history int) error {
		if _, err := pool.Exec(ctx, twoTablesCreate); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, twoTablesHistory, consumer, history, payloadHash()); err != nil {
			return err
		}
		if err := vacuum(ctx, pool, pgboxSchemaName, "dedupe"); err != nil {
			return err
		}
		return vacuum(ctx, pool, pgboxSchemaName, "queue")
	},
	insertMany: twoTablesInsertMany,
	claim: func(ctx context.Context, tx pgx.Tx) (pgx.Rows, error) {
		return tx.Query(ctx, twoTablesClaimDelete, consumer, batchSize)
	},
	tables: []string{"dedupe", "queue"},
}

// tablesContinuous receives and dispatches at once on shape for the case's
// duration, after storing history done messages: two producers store
// batches of 100 while the workers claim batches of 200, as in
// pgboxContinuous, all in plain SQL.
func (e *env) tablesContinuous(shape tableShape, history int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		kept := 0
		if history > 0 {
			kept = s.n(history)
		}
		workers := e.cfg.Workers
		r, err := e.newRig(ctx, workers+4)
		if err != nil {
			return nil, err
		}
		defer r.close()
		if err := shape.setup(ctx, r.pool, kept); err != nil {
			return nil, err
		}
		var handled, next atomic.Int64
		trips := r.rt.n.Load()
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		g, gctx := errgroup.WithContext(wctx)
		for range workers {
			g.Go(func() error { return rawWorker(gctx, r.pool, shape.claim, &handled, math.MaxInt64) })
		}
		produce := func(ctx context.Context) error {
			ids, payloads, hashes := rawBatch("c", &next, 100)
			_, err := r.pool.Exec(ctx, shape.insertMany, consumer, ids, payloads, hashes)
			return err
		}
		n, elapsed, err := continuous(gctx, s.d(e.cfg.Duration), &handled, &next, produce)
		stop()
		// The workers end on stop: only an error met before it counts.
		if werr := g.Wait(); werr != nil && !errors.Is(werr, context.Canceled) {
			return nil, werr
		}
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		trips = r.rt.n.Load() - trips
		var size int64
		if err := r.pool.QueryRow(ctx, tablesSize, shape.tables).Scan(&size); err != nil {
			return nil, err
		}
		return Figures{
			"msgs/s":           float64(n) / elapsed.Seconds(),
			"round trips/msg":  float64(trips) / float64(max(handled.Load(), 1)),
			"MiB on disk":      float64(size) / (1 << 20),
			"bytes/msg stored": float64(size) / float64(int64(kept)+next.Load()),
		}, nil
	}
}
