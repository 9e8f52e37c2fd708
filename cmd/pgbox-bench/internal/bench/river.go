package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

const riverSchemaName = "bench_river"

// noopArgs is the River job the peer cases insert and work.
type noopArgs struct {
	Bench bool `json:"bench"`
}

func (noopArgs) Kind() string { return "noop" }

// noopWorker counts the jobs it works.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	handled *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.handled.Add(1)
	return nil
}

// riverClient makes a fresh River schema and a client working it with
// maxWorkers at once, tuned as River's own `river bench` is.
func (e *env) riverClient(ctx context.Context, pool *pgxpool.Pool, maxWorkers int, handled *atomic.Int64) (*river.Client[pgx.Tx], error) {
	if err := riverSchema(ctx, pool, riverSchemaName); err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{handled: handled})
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            e.log,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Schema:            riverSchemaName,
		Workers:           workers,
	})
}

// riverInsert inserts n no-op jobs with InsertMany, 1000 at a time.
func riverInsert(ctx context.Context, c *river.Client[pgx.Tx], n int) error {
	for from := 0; from < n; from += 1000 {
		params := make([]river.InsertManyParams, min(1000, n-from))
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{Bench: true}}
		}
		if _, err := c.InsertMany(ctx, params); err != nil {
			return err
		}
	}
	return nil
}

// riverDrain works a pre-inserted backlog of n jobs. It counts a job once
// River reports it completed, which is after its completer recorded it.
func (e *env) riverDrain(n, maxWorkers int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		n := s.n(n)
		pool, rt, err := newPool(ctx, e.cfg.URL, 40)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		var handled atomic.Int64
		c, err := e.riverClient(ctx, pool, maxWorkers, &handled)
		if err != nil {
			return nil, err
		}
		if err := riverInsert(ctx, c, n); err != nil {
			return nil, err
		}
		if err := vacuum(ctx, pool, riverSchemaName, "river_job"); err != nil {
			return nil, err
		}
		events, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1, Kinds: []river.EventKind{river.EventKindJobCompleted}})
		defer cancel()
		trips := rt.n.Load()
		start := time.Now()
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		defer c.Stop(context.WithoutCancel(ctx))
		for range n {
			select {
			case <-events:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		elapsed := time.Since(start)
		trips = rt.n.Load() - trips
		return Figures{"msgs/s": float64(n) / elapsed.Seconds(), "round trips/msg": float64(trips) / float64(n)}, nil
	}
}

// riverContinuous inserts and works jobs at once for the case's duration,
// like `river bench --duration`.
func (e *env) riverContinuous() func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		pool, _, err := newPool(ctx, e.cfg.URL, 40)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		var handled, produced atomic.Int64
		c, err := e.riverClient(ctx, pool, riverWorkers, &handled)
		if err != nil {
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		defer c.Stop(context.WithoutCancel(ctx))
		produce := func(ctx context.Context) error {
			produced.Add(100)
			return riverInsert(ctx, c, 100)
		}
		n, elapsed, err := continuous(ctx, s.d(e.cfg.Duration), &handled, &produced, produce)
		if err != nil {
			return nil, err
		}
		return Figures{"msgs/s": float64(n) / elapsed.Seconds()}, nil
	}
}
