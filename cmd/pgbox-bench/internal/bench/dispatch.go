package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
)

const (
	consumer = "bench"
	// batchSize is the dispatcher's and the plain-SQL loop's claim size in
	// the drain and continuous cases. Larger batches spread a batch's fixed
	// costs (begin, the claim record, the commit's WAL flush) over more
	// messages: measured on the 2-core machine, 4 workers drained 39k/s with
	// batches of 100, 50k/s with 200 and 52k/s with 400.
	batchSize = 200
	// riverWorkers is River's concurrency in the main cases: the value
	// River's own `river bench` settled on as its best.
	riverWorkers = 2000
	// backlogCap bounds how far producers run ahead of workers in the
	// continuous cases, as River's own benchmark does.
	backlogCap = 20_000
)

// env is what every case needs.
type env struct {
	cfg Config
	log *slog.Logger
	// listen is what the dispatchers and relays LISTEN on: nil for their
	// pool's own connections, or a direct connection when the pool goes
	// through a transaction pooler.
	listen *pgx.ConnConfig
	// pollOnly makes the dispatchers and relays poll-only (their
	// Config.PollOnly): no LISTEN at all, as behind a transaction pooler
	// without a direct connection.
	pollOnly bool
	// retained fills the retained scenario's schemas, which the operator
	// scenario shares, once a run.
	retained *retainedState
	// operator is the operator scenario's filled schema, which the
	// console's cases share.
	operator *operatorState
	// dead is the operator scenario's inbox of dead messages (failures at
	// a million), filled once.
	dead *deadState
}

// loadInbox stores n new messages in batches of 1000, four batches at once.
func loadInbox(ctx context.Context, in *inbox.Inbox, n int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for from := 0; from < n; from += 1000 {
		g.Go(func() error {
			msgs := make([]inbox.Message, 0, 1000)
			for i := from; i < min(from+1000, n); i++ {
				msgs = append(msgs, noopMessage("m"+strconv.Itoa(i)))
			}
			_, err := in.ReceiveBatch(ctx, msgs)
			return err
		})
	}
	return g.Wait()
}

func noopMessage(id string) inbox.Message {
	return inbox.Message{ID: id, EventType: "noop", Payload: []byte(`{"bench":true}`)}
}

// pgboxSchemaName is the schema every pgbox case (and the plain-SQL peer)
// works in, made afresh for each run.
const pgboxSchemaName = "bench_pgbox"

// rig is one run's pool on a freshly migrated pgbox schema, with an inbox
// for the bench consumer.
type rig struct {
	pool *pgxpool.Pool
	rt   *roundTrips
	in   *inbox.Inbox
}

// newRig opens a pool of conns connections and makes the schema afresh.
func (e *env) newRig(ctx context.Context, conns int) (*rig, error) {
	pool, rt, err := newPool(ctx, e.cfg.URL, int32(conns))
	if err != nil {
		return nil, err
	}
	r := &rig{pool: pool, rt: rt}
	if err := pgboxSchema(ctx, pool, pgboxSchemaName); err != nil {
		pool.Close()
		return nil, err
	}
	if r.in, err = inbox.New(pool, inbox.Config{Consumer: consumer, Schema: pgboxSchemaName}); err != nil {
		pool.Close()
		return nil, err
	}
	return r, nil
}

func (r *rig) close() { r.pool.Close() }

// backlog stores n new messages and analyzes the table.
func (r *rig) backlog(ctx context.Context, n int) error {
	if err := loadInbox(ctx, r.in, n); err != nil {
		return err
	}
	return vacuum(ctx, r.pool, pgboxSchemaName, "inbox")
}

// dispatcher returns a dispatcher of workers claiming batch messages at a
// time, whose no-op in-transaction handler calls done.
func (r *rig) dispatcher(e *env, workers, batch int, done func(*dispatcher.Message)) (*dispatcher.Dispatcher, error) {
	return dispatcher.New(r.pool, dispatcher.Config{
		Inbox: r.in, Workers: workers, BatchSize: batch, Logger: e.log, ListenConnConfig: e.listen, PollOnly: e.pollOnly,
		Handlers: map[string]dispatcher.Handler{"noop": dispatcher.InTx(func(_ context.Context, _ pgx.Tx, m *dispatcher.Message) error {
			done(m)
			return nil
		})},
	})
}

// counter returns a done function for rig.dispatcher that counts on c.
func counter(c *atomic.Int64) func(*dispatcher.Message) {
	return func(*dispatcher.Message) { c.Add(1) }
}

// pgboxDrain drains a pre-loaded backlog of n messages.
func (e *env) pgboxDrain(n, workers int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		n := s.n(n)
		r, err := e.newRig(ctx, workers+4)
		if err != nil {
			return nil, err
		}
		defer r.close()
		var handled atomic.Int64
		d, err := r.dispatcher(e, workers, batchSize, counter(&handled))
		if err != nil {
			return nil, err
		}
		if err := r.backlog(ctx, n); err != nil {
			return nil, err
		}
		trips := r.rt.n.Load()
		start := time.Now()
		if err := d.Start(ctx); err != nil {
			return nil, err
		}
		defer d.Stop(context.WithoutCancel(ctx))
		if err := waitCount(ctx, &handled, int64(n)); err != nil {
			return nil, err
		}
		if err := waitInboxDone(ctx, r.pool); err != nil {
			return nil, err
		}
		return drained(n, time.Since(start), r.rt.n.Load()-trips), nil
	}
}

// drained is what a drain of n messages in elapsed with trips round trips
// measured.
func drained(n int, elapsed time.Duration, trips int64) Figures {
	return Figures{"msgs/s": float64(n) / elapsed.Seconds(), "round trips/msg": float64(trips) / float64(n)}
}

// waitCount waits until c reaches n.
func waitCount(ctx context.Context, c *atomic.Int64, n int64) error {
	for c.Load() < n {
		if err := sleep(ctx, time.Millisecond); err != nil {
			return fmt.Errorf("%d of %d handled: %w", c.Load(), n, err)
		}
	}
	return nil
}

// waitInboxDone waits until the committed inbox holds no pending or
// running message.
func waitInboxDone(ctx context.Context, pool *pgxpool.Pool) error {
	return waitNone(ctx, pool, "inbox", "status IN ('pending', 'running')")
}

// waitNone waits until no committed row of the bench schema's table
// matches where.
func waitNone(ctx context.Context, pool *pgxpool.Pool, table, where string) error {
	q := "SELECT EXISTS (SELECT 1 FROM " + pgx.Identifier{pgboxSchemaName, table}.Sanitize() + " WHERE " + where + ")"
	for {
		var left bool
		if err := pool.QueryRow(ctx, q).Scan(&left); err != nil {
			return err
		}
		if !left {
			return nil
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pgboxContinuous receives and dispatches at once for the case's duration:
// a producer stores batches of 100 while the workers handle them.
func (e *env) pgboxContinuous(workers int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		r, err := e.newRig(ctx, workers+6)
		if err != nil {
			return nil, err
		}
		defer r.close()
		var handled, next atomic.Int64
		d, err := r.dispatcher(e, workers, batchSize, counter(&handled))
		if err != nil {
			return nil, err
		}
		if err := d.Start(ctx); err != nil {
			return nil, err
		}
		defer d.Stop(context.WithoutCancel(ctx))
		produce := func(ctx context.Context) error {
			msgs := make([]inbox.Message, 100)
			for i := range msgs {
				msgs[i] = noopMessage("c" + strconv.FormatInt(next.Add(1), 10))
			}
			_, err := r.in.ReceiveBatch(ctx, msgs)
			return err
		}
		n, elapsed, err := continuous(ctx, s.d(e.cfg.Duration), &handled, &next, produce)
		if err != nil {
			return nil, err
		}
		return Figures{"msgs/s": float64(n) / elapsed.Seconds()}, nil
	}
}

// continuous runs two producers, each calling produce while fewer than
// backlogCap produced messages wait, for d, and returns how many messages
// were handled meanwhile.
func continuous(ctx context.Context, d time.Duration, handled, produced *atomic.Int64, produce func(context.Context) error) (int64, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
	)
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if produced.Load()-handled.Load() > backlogCap {
					_ = sleep(ctx, time.Millisecond)
					continue
				}
				if err := produce(ctx); err != nil && ctx.Err() == nil {
					firstErr.CompareAndSwap(nil, &err)
					cancel()
				}
			}
		})
	}
	// Let the pipeline fill before timing it.
	_ = sleep(ctx, min(d/5, 2*time.Second))
	from, start := handled.Load(), time.Now()
	_ = sleep(ctx, d)
	n, elapsed := handled.Load()-from, time.Since(start)
	cancel()
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return 0, 0, *p
	}
	return n, elapsed, nil
}
