package bench

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/pgbox/pgbox/inbox"
)

// pgboxIngest receives new messages, batch at a time (Receive when batch
// is 1, ReceiveBatch otherwise), from conns connections, for the case's
// duration.
func (e *env) pgboxIngest(conns, batch int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		pool, rt, err := newPool(ctx, e.cfg.URL, int32(conns)+2)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		if err := pgboxSchema(ctx, pool, "bench_pgbox"); err != nil {
			return nil, err
		}
		in, err := inbox.New(pool, inbox.Config{Consumer: consumer, Schema: "bench_pgbox"})
		if err != nil {
			return nil, err
		}
		var next atomic.Int64
		send := func(ctx context.Context) (int, error) {
			if batch == 1 {
				_, err := in.Receive(ctx, noopMessage("p"+strconv.FormatInt(next.Add(1), 10)))
				return 1, err
			}
			msgs := make([]inbox.Message, batch)
			for i := range msgs {
				msgs[i] = noopMessage("p" + strconv.FormatInt(next.Add(1), 10))
			}
			_, err := in.ReceiveBatch(ctx, msgs)
			return batch, err
		}
		trips := rt.n.Load()
		n, elapsed, err := flood(ctx, conns, s.d(e.cfg.Duration), send)
		if err != nil {
			return nil, err
		}
		trips = rt.n.Load() - trips
		return Figures{"msgs/s": float64(n) / elapsed.Seconds(), "round trips/msg": float64(trips) / float64(n)}, nil
	}
}
