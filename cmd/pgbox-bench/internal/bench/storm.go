package bench

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
)

// stormWindow is how many of the latest ids redeliveries are drawn from.
const stormWindow = 10_000

// stormIDs hands out new ids and redeliveries of ids already received.
type stormIDs struct {
	mu     sync.Mutex
	next   int
	window []string // the latest ids whose first delivery has returned
	oldest int      // once the window is full, where the next id goes
}

// pick returns an id to deliver and whether it is a redelivery: nine in
// ten are, once there is something to redeliver.
func (s *stormIDs) pick(prefix string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.window) > 0 && rand.IntN(10) != 0 {
		return s.window[rand.IntN(len(s.window))], true
	}
	s.next++
	return prefix + strconv.Itoa(s.next), false
}

func (s *stormIDs) received(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.window) < stormWindow {
		s.window = append(s.window, id)
		return
	}
	s.window[s.oldest] = id
	s.oldest = (s.oldest + 1) % stormWindow
}

// storm floods deliveries, nine in ten of them redeliveries, from 4
// connections, and reports the round trips redeliveries cost. deliver
// stores one message on ctx.
func (e *env) storm(s scale, ctx context.Context, rt *roundTrips, deliver func(ctx context.Context, id string) error) (Figures, error) {
	ids := &stormIDs{}
	var redeliveries, redeliveryTrips atomic.Int64
	send := func(ctx context.Context) (int, error) {
		id, again := ids.pick("s")
		if again {
			redeliveries.Add(1)
			ctx = withCounter(ctx, &redeliveryTrips)
		}
		if err := deliver(ctx, id); err != nil {
			return 0, err
		}
		if !again {
			ids.received(id)
		}
		return 1, nil
	}
	trips := rt.n.Load()
	n, elapsed, err := flood(ctx, 4, s.d(e.cfg.Duration), send)
	if err != nil {
		return nil, err
	}
	trips = rt.n.Load() - trips
	return Figures{
		"msgs/s":                  float64(n) / elapsed.Seconds(),
		"round trips/msg":         float64(trips) / float64(n),
		"round trips/redelivery":  float64(redeliveryTrips.Load()) / float64(max(redeliveries.Load(), 1)),
		"redeliveries/round trip": float64(redeliveries.Load()) / float64(max(redeliveryTrips.Load(), 1)),
	}, nil
}

func (e *env) pgboxStorm() func(context.Context, scale) (Figures, error) {
	return e.stormOn(func(r *rig) func(context.Context, string) error {
		return func(ctx context.Context, id string) error {
			_, err := r.in.Receive(ctx, noopMessage(id))
			return err
		}
	})
}

func (e *env) rawStorm() func(context.Context, scale) (Figures, error) {
	hash := payloadHash()
	return e.stormOn(func(r *rig) func(context.Context, string) error {
		return func(ctx context.Context, id string) error {
			_, err := r.pool.Exec(ctx, rawInsertOne, consumer, id, benchPayload, hash)
			return err
		}
	})
}

// stormOn runs the storm with the delivery function deliverer makes.
func (e *env) stormOn(deliverer func(*rig) func(context.Context, string) error) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		r, err := e.newRig(ctx, 6)
		if err != nil {
			return nil, err
		}
		defer r.close()
		return e.storm(s, ctx, r.rt, deliverer(r))
	}
}
