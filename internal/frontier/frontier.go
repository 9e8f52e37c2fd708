// Package frontier tells a claim where in an index of pending rows, in
// available_at order, to start looking for fresh work.
//
// A claimed row leaves its entry in the partial index of pending rows (the
// inbox's inbox_pending_idx, the outbox's outbox_pending_idx) until VACUUM
// removes it, so a claim that reads the index from its start steps over
// every row claimed since the partition was last vacuumed: after 300,000
// claims, some 1,500 index pages per claim, 3 ms, growing until autovacuum
// comes. So a claim reads from the frontier on: the oldest available_at
// among the fresh rows the last claims took, less a margin.
//
// A row can still turn pending behind it: written in a transaction that
// began before the frontier (its available_at is the transaction's start)
// and committed after; or left pending by a claim that rolled back. The
// first claim after the full-claim interval reads the index from its
// start, takes such rows, and sets the frontier anew; so they wait that
// long more at most, or until the next poll when the claimer is idle.
//
// A row with an ordering key can be claimed only once the row before it
// on its key is done; meanwhile the claims of other rows move the frontier
// on, past it. So once the claimer has finished a claimed row that has a
// key, it calls Rewind with the row's arrival time (received_at,
// created_at): the next claim reads from there, less the margin, and finds
// the key's next row, which arrived after it. A row's available_at is never
// earlier than its arrival (both are the writing transaction's start, and
// every later change sets it to now() or after), and the key's next row
// arrived later, unless its transaction began more than the margin before
// the finished row's: that one waits for a full claim, as any late row.
// Without the rewind, a key's backlog older than the frontier would move
// one row per full claim, one a second; with a rewind to the index's start,
// a claimer whose rows all have keys would read every entry claimed since
// the last vacuum, as if there were no frontier.
package frontier

import (
	"sync"
	"time"
)

const (
	// Margin is how far behind the oldest row claimed the frontier stays,
	// for rows written in transactions that began a little before it.
	Margin = time.Second
	// FullEvery is how often at least one claim reads the index from its
	// start.
	FullEvery = time.Second
)

// A Frontier is where the claims of one claimer (a dispatcher, a relay)
// start. It is safe for concurrent use.
type Frontier struct {
	margin, fullEvery time.Duration

	mu       sync.Mutex
	from     time.Time // zero until a claim took a fresh row
	back     time.Time // where the next claim starts instead, if earlier than from (Rewind); zero if none
	lastFull time.Time // when a claim last read from the start
}

// New returns a Frontier that stays margin behind the oldest row claimed
// and has a claim read from the start at least every fullEvery.
func New(margin, fullEvery time.Duration) *Frontier {
	return &Frontier{margin: margin, fullEvery: fullEvery}
}

// Next returns where the next claim starts: a time, or nil for the start
// of the index (a full claim). The first claim after a Rewind starts where
// it said, if that is earlier than the frontier.
func (f *Frontier) Next(now time.Time) *time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.from.IsZero() || f.lastFull.IsZero() || now.Sub(f.lastFull) >= f.fullEvery {
		f.lastFull, f.back = now, time.Time{}
		return nil
	}
	from := f.from
	if !f.back.IsZero() {
		if f.back.Before(from) {
			from = f.back
		}
		f.back = time.Time{}
	}
	return &from
}

// Took records the oldest available_at among the fresh rows a claim that
// started at start (Next's) took, nil if it took none. A full claim saw
// every pending row, so it sets the frontier; any other only moves it on.
func (f *Frontier) Took(start, oldest *time.Time) {
	if oldest == nil {
		return
	}
	from := oldest.Add(-f.margin)
	f.mu.Lock()
	defer f.mu.Unlock()
	if start == nil || from.After(f.from) {
		f.from = from
	}
}

// Rewind makes the next claim read from arrived, less the margin, if that
// is behind the frontier: call it once a claimed row that has an ordering
// key is finished, committed, with the row's arrival time, so that the
// key's next row, which may be older than the frontier, is found. The
// rewind holds until a claim starts from it: a concurrent claim that
// started before it cannot undo it.
func (f *Frontier) Rewind(arrived time.Time) {
	back := arrived.Add(-f.margin)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.back.IsZero() || back.Before(f.back) {
		f.back = back
	}
}
