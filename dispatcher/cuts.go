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
