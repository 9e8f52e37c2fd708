// Package claimrec keeps the claim records a process will settle itself.
//
// A dispatcher or relay worker claims a batch inside a transaction and,
// before it runs handlers or publishes, records the claim from another
// session (inbox_claims, outbox_claims): one row naming the transaction.
// A record whose transaction aborted marks attempts still to be counted,
// and the next worker to claim counts them. But a worker whose transaction
// a database outage cut settles its batch itself once the database is
// back (given back, or its outcomes recorded after all), so no worker of
// the same process may count it as lost meanwhile: the worker holds its
// transaction's id here from before its record exists until it is done
// with it, and the statements that count lost batches leave the held ones
// alone. Another process, which cannot tell that this one is alive, may
// still count one that aborted.
package claimrec

import "sync"

// Held is the set of transaction ids whose claim records this process
// will settle itself. The zero value is ready to use.
type Held struct {
	mu   sync.Mutex
	xids map[string]bool
}

// Add holds xid.
func (h *Held) Add(xid string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.xids == nil {
		h.xids = make(map[string]bool)
	}
	h.xids[xid] = true
}

// Drop lets xid go.
func (h *Held) Drop(xid string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.xids, xid)
}

// List returns the transaction ids held, never nil (an empty array, not
// NULL, for the statements' <> ALL).
func (h *Held) List() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.xids))
	for xid := range h.xids {
		out = append(out, xid)
	}
	return out
}
