package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillinbox"
)

// latencyWarmUp is how long a latency case runs at its rate before it
// starts timing messages, on the same pool, schema and workers it then
// times. Each run makes all of them afresh, and their first second or two
// is start-up, not the steady rate the case measures: every new connection
// (latencyConns) pays for its backend's start and its first statements'
// catalog lookups and planning at once, on a loaded machine, and that
// stalled the first messages for up to a second, which was the whole
// p99.9 and max of the inbox case.
const latencyWarmUp = 2 * time.Second

// latencyConns is the pool size of the latency cases, shared by the
// senders (16), the subscribers (16), the relay and the dispatcher's
// workers (4): a few connections per core, as PostgreSQL's own advice has
// it, rather than one for each. More connections only let more backends
// contend for the 2 cores. At 1,000/s end to end, p99 was 50-100 ms with
// 40 and 24-42 ms with 12, with about 18% less CPU per message. A wait for
// a connection is a short FIFO queue in the pool, where 40 connections
// made a run queue of some 40 processes in the kernel.
const latencyConns = 12

// latencies collects how long messages took, keyed by id from their start.
// A path with named points between start and done (legs) also gets how
// long each leg took: where an end-to-end figure goes.
type latencies struct {
	started sync.Map   // id → time.Time
	points  []string   // the legs' ends before done, in the order passed
	passed  []sync.Map // per point: id → time.Time
	mu      sync.Mutex
	took    []time.Duration
	legs    [][]time.Duration // start → points[0], …, points[n-1] → done
}

// legs returns latencies whose messages pass points, in order, between
// start and done.
func legs(points ...string) *latencies {
	return &latencies{points: points, passed: make([]sync.Map, len(points)), legs: make([][]time.Duration, len(points)+1)}
}

func (l *latencies) start(id string, at time.Time) { l.started.Store(id, at) }

// restart moves id's start to at, unless it is already done.
func (l *latencies) restart(id string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.started.Load(id); ok {
		l.started.Store(id, at)
	}
}

// pass records that the timed message id reached points[point] now.
func (l *latencies) pass(point int, id string) {
	if _, timed := l.started.Load(id); timed {
		l.passed[point].LoadOrStore(id, time.Now()) // the first time: a redelivery is not a leg
	}
}

// handled is done for a dispatcher's message.
func (l *latencies) handled(m *dispatcher.Message) { l.done(m.ID) }

func (l *latencies) done(id string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.started.LoadAndDelete(id)
	if !ok {
		return // a retried handler, or a warm-up straggler
	}
	l.took = append(l.took, now.Sub(at.(time.Time)))
	from := at.(time.Time)
	for i := range l.passed {
		// A point not yet recorded was passed just now: the handler can
		// finish before the subscriber that stored its message has seen
		// its own commit return.
		p := now
		if t, ok := l.passed[i].LoadAndDelete(id); ok {
			p = t.(time.Time)
		}
		l.legs[i] = append(l.legs[i], p.Sub(from))
		from = p
	}
	if len(l.points) > 0 {
		l.legs[len(l.points)] = append(l.legs[len(l.points)], now.Sub(from))
	}
}

// wait waits until n timed messages are done, for at most a minute: the
// database can be drained while a broker still holds messages.
func (l *latencies) wait(ctx context.Context, n int64) error {
	for deadline := time.Now().Add(time.Minute); ; {
		l.mu.Lock()
		handled := int64(len(l.took))
		l.mu.Unlock()
		switch {
		case handled >= n:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("only %d of %d timed messages were handled a minute after the last was sent", handled, n)
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
}

// figures returns the percentiles of the time taken, each leg's p99,
// numbered and named by its ends ("leg 2: published → stored p99 ms"; the
// first leg starts at from, the last ends at to), and the rate the senders
// held.
func (l *latencies) figures(timed int64, held float64, from, to string) (Figures, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if int64(len(l.took)) < timed {
		return nil, fmt.Errorf("only %d of %d timed messages were handled", len(l.took), timed)
	}
	took := slices.Sorted(slices.Values(l.took))
	f := Figures{"p50 ms": quantile(took, 0.50), "p99 ms": quantile(took, 0.99), "p99.9 ms": quantile(took, 0.999), "max ms": quantile(took, 1), "sent/s": held}
	ends := append(append([]string{from}, l.points...), to)
	for i, leg := range l.legs {
		if len(leg) > 0 {
			f[fmt.Sprintf("leg %d: %s → %s p99 ms", i+1, ends[i], ends[i+1])] = quantile(slices.Sorted(slices.Values(leg)), 0.99)
		}
	}
	return f, nil
}

// quantile returns the q-quantile of s, sorted, in milliseconds.
func quantile(s []time.Duration, q float64) float64 {
	return float64(s[min(int(q*float64(len(s))), len(s)-1)].Microseconds()) / 1000
}

// timedPaced is paced for latencyWarmUp (none in a smoke run) plus d,
// without a break: send learns whether to time message i (it is past the
// warm-up). It returns how many messages were timed and the rate the
// senders held while timing.
func (e *env) timedPaced(ctx context.Context, rate int, d time.Duration, send func(ctx context.Context, i int64, timed bool) error) (int64, float64, error) {
	warmUp := latencyWarmUp
	if e.cfg.Smoke {
		warmUp = 0
	}
	warm := int64(warmUp.Seconds() * float64(rate))
	return paced(ctx, rate, warmUp+d, warm, func(ctx context.Context, i int64) error {
		return send(ctx, i, i >= warm)
	})
}

// paced calls send for rate messages a second, for d, from 16 goroutines,
// each message at its own time. Of the messages from the from-th on, it
// returns how many were sent and the rate the senders held: those messages
// over the time from the first one's due time until the last one was taken
// up. Senders that fall behind start messages late, so a case that cannot
// keep its rate times a lighter load than it claims: the report shows the
// rate held, and a latency target is not met below 95% of its rate.
func paced(ctx context.Context, rate int, d time.Duration, from int64, send func(ctx context.Context, i int64) error) (int64, float64, error) {
	var sent, lastStart atomic.Int64 // lastStart: since start, in ns
	g, ctx := errgroup.WithContext(ctx)
	due := make(chan int64, rate)
	start, interval := time.Now(), time.Second/time.Duration(rate)
	g.Go(func() error {
		defer close(due)
		for i := int64(0); ; i++ {
			at := start.Add(time.Duration(i) * interval)
			if at.Sub(start) >= d {
				return nil
			}
			if err := sleep(ctx, time.Until(at)); err != nil {
				return err
			}
			select {
			case due <- i:
			case <-ctx.Done(): // the senders failed: none takes it
				return ctx.Err()
			}
		}
	})
	for range 16 {
		g.Go(func() error {
			for i := range due {
				if i >= from {
					storeMax(&lastStart, int64(time.Since(start)))
				}
				if err := send(ctx, i); err != nil {
					return err
				}
				if i >= from {
					sent.Add(1)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	n := sent.Load()
	if n == 0 {
		return 0, 0, fmt.Errorf("no message from the %dth on was sent in %s at %d a second", from, d, rate)
	}
	took := time.Duration(lastStart.Load()) - time.Duration(from)*interval + interval
	return n, float64(n) / took.Seconds(), nil
}

// storeMax sets v to x if x is greater.
func storeMax(v *atomic.Int64, x int64) {
	for last := v.Load(); x > last && !v.CompareAndSwap(last, x); last = v.Load() {
	}
}

// inboxLatency receives single messages at rate a second and measures
// each from the Receive call to the end of its handler, after
// latencyWarmUp.
func (e *env) inboxLatency(rate int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		r, err := e.newRig(ctx, latencyConns)
		if err != nil {
			return nil, err
		}
		defer r.close()
		l := legs()
		d, err := r.dispatcher(e, dispatcher.WorkersDefault, dispatcher.BatchSizeDefault, l.handled)
		if err != nil {
			return nil, err
		}
		if err := d.Start(ctx); err != nil {
			return nil, err
		}
		defer d.Stop(context.WithoutCancel(ctx))
		timed, held, err := e.timedPaced(ctx, rate, s.d(e.cfg.Duration), func(ctx context.Context, i int64, timed bool) error {
			id := "l" + strconv.FormatInt(i, 10)
			if timed {
				l.start(id, time.Now())
			}
			_, err := r.in.Receive(ctx, noopMessage(id))
			return err
		})
		if err != nil {
			return nil, err
		}
		if err := waitInboxDone(ctx, r.pool); err != nil {
			return nil, err
		}
		return l.figures(timed, held, "received", "handled")
	}
}

// spread publishes each message to the next of several GoChannels in turn,
// so that as many subscribers store messages at once (a GoChannel hands its
// subscriber one message at a time, waiting for its ack).
type spread struct {
	chans     []*gochannel.GoChannel
	next      atomic.Int64
	published func(id string) // called for each message as it is handed over
}

func (s *spread) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		s.published(m.UUID)
		if err := s.chans[s.next.Add(1)%int64(len(s.chans))].Publish(topic, m); err != nil {
			return err
		}
	}
	return nil
}

func (s *spread) Close() error {
	for _, c := range s.chans {
		_ = c.Close()
	}
	return nil
}

// endToEndLatency writes single outbox rows at rate a second and measures
// each from its transaction's commit to the end of the consumer's handler:
// relay, an in-process broker (16 GoChannel subscribers storing with
// watermillinbox, acking after the commit), inbox, dispatcher. Only
// messages written after latencyWarmUp are timed. Each leg's p99 is
// reported too: commit to the relay's publish, publish to the inbox's
// commit, and that to the handler's end.
func (e *env) endToEndLatency(rate int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		r, err := e.newRig(ctx, latencyConns)
		if err != nil {
			return nil, err
		}
		defer r.close()
		pool := r.pool
		out, err := outbox.New(pool, outbox.Config{Schema: pgboxSchemaName})
		if err != nil {
			return nil, err
		}
		l := legs("published", "stored")
		d, err := r.dispatcher(e, dispatcher.WorkersDefault, dispatcher.BatchSizeDefault, l.handled)
		if err != nil {
			return nil, err
		}
		broker := &spread{published: func(id string) { l.pass(0, id) }}
		store := watermillinbox.Handler(watermillinbox.Config{Inbox: r.in, Logger: e.log})
		subCtx, stopSubs := context.WithCancel(ctx)
		defer stopSubs()
		for range 16 {
			ch := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1000}, watermill.NopLogger{})
			msgs, err := ch.Subscribe(subCtx, "bench")
			if err != nil {
				return nil, err
			}
			go func() {
				for m := range msgs {
					if store(m) != nil {
						m.Nack()
						continue
					}
					l.pass(1, m.UUID)
					m.Ack()
				}
			}()
			broker.chans = append(broker.chans, ch)
		}
		defer broker.Close()
		rel, err := relay.New(pool, relay.Config{Schema: pgboxSchemaName, Publisher: broker, Logger: e.log, ListenConnConfig: e.listen, PollOnly: e.pollOnly})
		if err != nil {
			return nil, err
		}
		for _, svc := range []interface{ Start(context.Context) error }{d, rel} {
			if err := svc.Start(ctx); err != nil {
				return nil, err
			}
		}
		defer d.Stop(context.WithoutCancel(ctx))
		defer rel.Stop(context.WithoutCancel(ctx))
		timed, held, err := e.timedPaced(ctx, rate, s.d(e.cfg.Duration), func(ctx context.Context, _ int64, timed bool) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			id := uuid.Must(uuid.NewV7())
			if _, err := out.Write(ctx, tx, outbox.Message{ID: id, Topic: "bench", EventType: "noop", Payload: benchPayload}); err != nil {
				return err
			}
			// Started just before the commit, in case the message
			// arrives before the commit's return is seen; restarted when
			// it is, which is the figure almost always kept.
			if timed {
				l.start(id.String(), time.Now())
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			l.restart(id.String(), time.Now())
			return nil
		})
		if err != nil {
			return nil, err
		}
		// Not an empty outbox and inbox: the GoChannels may still hold
		// messages published but not yet stored.
		if err := l.wait(ctx, timed); err != nil {
			return nil, err
		}
		return l.figures(timed, held, "committed", "handled")
	}
}
