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
		r, err := e.newRig(ctx, conns+2)
		if err != nil {
			return nil, err
		}
		defer r.close()
		var next atomic.Int64
		return e.ingest(ctx, s, r, conns, func(ctx context.Context) (int, error) {
			if batch == 1 {
				_, err := r.in.Receive(ctx, noopMessage("p"+strconv.FormatInt(next.Add(1), 10)))
				return 1, err
			}
			msgs := make([]inbox.Message, batch)
			for i := range msgs {
				msgs[i] = noopMessage("p" + strconv.FormatInt(next.Add(1), 10))
			}
			_, err := r.in.ReceiveBatch(ctx, msgs)
			return batch, err
		})
	}
}

// ingest floods send from conns connections for the case's duration and
// reports messages and round trips.
func (e *env) ingest(ctx context.Context, s scale, r *rig, conns int, send func(context.Context) (int, error)) (Figures, error) {
	trips := r.rt.n.Load()
	n, elapsed, err := flood(ctx, conns, s.d(e.cfg.Duration), send)
	if err != nil {
		return nil, err
	}
	trips = r.rt.n.Load() - trips
	return Figures{"msgs/s": float64(n) / elapsed.Seconds(), "round trips/msg": float64(trips) / float64(n)}, nil
}
