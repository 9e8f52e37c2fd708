package bench

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// The plain-SQL ceiling: pgbox's inbox table, worked by the simplest
// statements that do the job, from a minimal pgx loop. pgbox's own SQL
// does more (ordering keys, lease rescue, conflict detection, notify,
// finding each id's partition); the ratio says what that costs. The
// cases' ids are no UUIDv7s, so a fresh inbox keeps them all in
// generation 0: the plain statements write bucket 0, as a loop that knows
// where its rows go would.
const (
	rawInsertOne = `
INSERT INTO bench_pgbox.inbox (consumer, message_id, event_type, payload, payload_hash, max_attempts, bucket)
VALUES ($1, $2, 'noop', $3, $4, 25, 0)
ON CONFLICT DO NOTHING`

	rawInsertMany = `
INSERT INTO bench_pgbox.inbox (consumer, message_id, event_type, payload, payload_hash, max_attempts, bucket)
SELECT $1, m.id, 'noop', m.payload, m.hash, 25, 0
FROM unnest($2::text[], $3::bytea[], $4::bytea[]) AS m(id, payload, hash)
ON CONFLICT DO NOTHING`

	// rawClaimDone claims a batch and marks it done in one statement, in
	// the transaction that would run the handlers: the shape of pgbox's
	// claim (rows found again by their key, in their own partition),
	// without its ordering keys, rescues, leases and claim record.
	rawClaimDone = `
UPDATE bench_pgbox.inbox AS i SET status = 'done', attempts = i.attempts + 1, claim_token = $3, processed_at = now()
FROM (SELECT message_id, bucket FROM bench_pgbox.inbox
      WHERE consumer = $1 AND status = 'pending' AND available_at <= now()
      ORDER BY available_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED) AS c
WHERE i.consumer = $1 AND i.message_id = c.message_id AND i.bucket = c.bucket
RETURNING i.message_id, i.payload`
)

var benchPayload = []byte(`{"bench":true}`)

func payloadHash() []byte {
	h := sha256.Sum256(benchPayload)
	return h[:]
}

// rawDrain drains a backlog of n from workers loops of: begin, claim and
// mark done, commit.
func (e *env) rawDrain(n, workers int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		n := s.n(n)
		r, err := e.newRig(ctx, workers+4)
		if err != nil {
			return nil, err
		}
		defer r.close()
		if err := r.backlog(ctx, n); err != nil {
			return nil, err
		}
		var handled atomic.Int64
		trips := r.rt.n.Load()
		start := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		for range workers {
			g.Go(func() error { return rawWorker(gctx, r.pool, claimDone, &handled, int64(n)) })
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		return drained(n, time.Since(start), r.rt.n.Load()-trips), nil
	}
}

// claimFunc claims a batch in tx, completing it in the same statement, and
// returns its rows (message id, payload): what a plain-SQL worker loops on.
type claimFunc func(ctx context.Context, tx pgx.Tx) (pgx.Rows, error)

// claimDone claims with rawClaimDone, under a fresh claim token.
func claimDone(ctx context.Context, tx pgx.Tx) (pgx.Rows, error) {
	return tx.Query(ctx, rawClaimDone, consumer, batchSize, rand.Int64())
}

// rawWorker loops on begin, claim, commit until handled reaches n or ctx
// ends, waiting a millisecond after a claim that found nothing.
func rawWorker(ctx context.Context, pool *pgxpool.Pool, claim claimFunc, handled *atomic.Int64, n int64) error {
	for handled.Load() < n {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		rows, err := claim(ctx, tx)
		if err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		claimed := 0
		for rows.Next() {
			var (
				id      string
				payload []byte
			)
			if err := rows.Scan(&id, &payload); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			claimed++
		}
		if err := rows.Err(); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if claimed == 0 {
			if err := sleep(ctx, time.Millisecond); err != nil {
				return err
			}
			continue
		}
		handled.Add(int64(claimed))
	}
	return nil
}

// rawIngest inserts new messages, batch at a time (one row with the
// single-row statement when batch is 1), from conns connections, for the
// case's duration.
func (e *env) rawIngest(conns, batch int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		r, err := e.newRig(ctx, conns+2)
		if err != nil {
			return nil, err
		}
		defer r.close()
		hash := payloadHash()
		var next atomic.Int64
		return e.ingest(ctx, s, r, conns, func(ctx context.Context) (int, error) {
			if batch == 1 {
				_, err := r.pool.Exec(ctx, rawInsertOne, consumer, "r"+strconv.FormatInt(next.Add(1), 10), benchPayload, hash)
				return 1, err
			}
			ids, payloads, hashes := rawBatch("r", &next, batch)
			_, err := r.pool.Exec(ctx, rawInsertMany, consumer, ids, payloads, hashes)
			return batch, err
		})
	}
}

// rawBatch makes the arguments of rawInsertMany for n new messages, their
// ids prefix plus the next numbers of next.
func rawBatch(prefix string, next *atomic.Int64, n int) (ids []string, payloads, hashes [][]byte) {
	ids, payloads, hashes = make([]string, n), make([][]byte, n), make([][]byte, n)
	hash := payloadHash()
	for i := range n {
		ids[i], payloads[i], hashes[i] = prefix+strconv.FormatInt(next.Add(1), 10), benchPayload, hash
	}
	return ids, payloads, hashes
}

// flood calls send from conns goroutines for d and returns how many
// messages they sent.
func flood(ctx context.Context, conns int, d time.Duration, send func(context.Context) (int, error)) (int64, time.Duration, error) {
	var sent atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	g, ctx := errgroup.WithContext(ctx)
	for range conns {
		g.Go(func() error {
			for time.Now().Before(deadline) {
				n, err := send(ctx)
				if err != nil {
					return err
				}
				sent.Add(int64(n))
			}
			return nil
		})
	}
	err := g.Wait()
	return sent.Load(), time.Since(start), err
}
