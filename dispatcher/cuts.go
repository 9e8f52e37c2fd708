package dispatcher

import "sync"

// maxCutRefunds is how many times a dispatcher gives back the attempt of
// one message that a database outage cut (see runTx) before it charges
// such an attempt after all. An outage cuts a message's attempt once, or
// twice; but a cut connection does not tell an outage from a handler that
// breaks its own session (crashing its server backend, say), and such a
// handler, always given its attempt back, would never reach MaxAttempts.
const maxCutRefunds = 3

// maxCutsKept bounds the messages cuts remembers: past it, it starts over.
// One outage cuts at most a batch per worker.
const maxCutsKept = 1000

// cuts counts, per message, the attempts of this dispatcher that a
// database outage cut. The count is the process's own: another process,
// or a restart, starts from zero.
type cuts struct {
	mu sync.Mutex
	n  map[string]int
}

// refund counts a cut attempt of message id and reports whether it is
// given back: at most maxCutRefunds times per message.
func (c *cuts) refund(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil || len(c.n) >= maxCutsKept {
		c.n = make(map[string]int)
	}
	c.n[id]++
	return c.n[id] <= maxCutRefunds
}

// held are the batch transactions of this dispatcher whose claim record
// (see recordClaimSQL) it wrote and has not taken back yet. Its workers
// settle those themselves, whatever became of the transaction (committed,
// or cut by an outage and given back), so no worker of this process counts
// them as lost: reconcileSQL and recordClaimSQL leave them alone. Another
// process, which cannot tell that this one is alive, may still count one
// that aborted.
type held struct {
	mu   sync.Mutex
	xids map[string]bool
}

func (h *held) add(xid string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.xids == nil {
		h.xids = make(map[string]bool)
	}
	h.xids[xid] = true
}

func (h *held) drop(xid string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.xids, xid)
}

// list returns the transaction ids held, never nil (an empty array, not
// NULL, for the statements' <> ALL).
func (h *held) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.xids))
	for xid := range h.xids {
		out = append(out, xid)
	}
	return out
}
