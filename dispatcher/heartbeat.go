package dispatcher

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// heartbeat keeps the leases of a batch's leased messages alive while they
// wait for their turn. A batch's messages run one after another, so without
// it a leased message queued behind slow ones would see its lease run out
// while its worker is alive and well, and be "rescued" by another worker
// (spending an attempt and recording a crash that never happened). Each
// message leaves the heartbeat when its own handler starts; from then on
// its lease, renewed at that moment, outlasts the handler's timeout.
type heartbeat struct {
	d       *Dispatcher
	done    chan struct{}
	mu      sync.Mutex
	stop    chan struct{}
	token   int64
	waiting []*claimed
}

// startHeartbeat begins renewing the leases of batch every third of the
// lease, and at once if now is set. Call close when the batch is over.
func (d *Dispatcher) startHeartbeat(token int64, batch []*claimed, now bool) *heartbeat {
	h := &heartbeat{d: d, done: make(chan struct{}), stop: make(chan struct{}), token: token}
	h.waiting = slices.Clone(batch)
	go h.run(now)
	return h
}

func (h *heartbeat) run(now bool) {
	defer close(h.done)
	if now {
		h.renew()
	}
	ticker := time.NewTicker(h.d.cfg.Lease / 3)
	defer ticker.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-ticker.C:
			h.renew()
		}
	}
}

// renew renews the leases of the messages still waiting.
func (h *heartbeat) renew() {
	h.mu.Lock()
	ids, buckets := make([]string, len(h.waiting)), make([]int32, len(h.waiting))
	for i, c := range h.waiting {
		ids[i], buckets[i] = c.msg.ID, c.bucket
	}
	h.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer cancel()
	if _, err := h.d.pool.Exec(ctx, h.d.q.renewLease, h.d.consumer, ids, h.token, h.d.cfg.Lease.Milliseconds(), buckets); err != nil {
		h.d.cfg.Logger.Warn("dispatcher: could not renew the leases of waiting messages; they may be taken over",
			slog.String("consumer", h.d.consumer), slog.Int("messages", len(ids)), slog.String("error", err.Error()))
	}
}

// starting takes id off the heartbeat: its handler is about to run.
func (h *heartbeat) starting(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiting = slices.DeleteFunc(h.waiting, func(w *claimed) bool { return w.msg.ID == id })
}

// close stops the heartbeat and waits for it.
func (h *heartbeat) close() {
	close(h.stop)
	<-h.done
}
