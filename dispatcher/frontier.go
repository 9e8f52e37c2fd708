package dispatcher

import (
	"sync"
	"time"
)

// A frontier tells a claim where in the inbox's pending index to start
// looking for fresh work.
//
// A claimed message leaves its entry in the index of pending messages
// (inbox_pending_idx, in available_at order) until VACUUM removes it, so a
// claim that reads the index from its start steps over every message
// claimed since the partition was last vacuumed: after 300,000 claims,
// some 1,500 index pages per claim, 3 ms, growing until autovacuum comes
// (TestAClaimStartsAtTheFrontier). So a claim reads from the frontier on:
// the oldest available_at among the fresh messages the last claims took,
// less frontierMargin.
//
// A message can still turn pending behind it: received in a transaction
// that began before the frontier (its available_at is the transaction's
// start) and committed after; or left pending by a batch transaction that
// rolled back. The first claim after fullClaimEvery reads the index from
// its start, takes such messages, and sets the frontier anew; so they wait
// that long more at most, or until the next poll (Config.PollInterval)
// when the workers are idle (TestALateMessageIsClaimedByAFullClaim).
type frontier struct {
	margin, fullEvery time.Duration

	mu       sync.Mutex
	from     time.Time // zero until a claim took a fresh message
	lastFull time.Time // when a claim last read from the start
}

const (
	// frontierMargin is how far behind the oldest message claimed the
	// frontier stays, for messages received in transactions that began a
	// little before it.
	frontierMargin = time.Second
	// fullClaimEvery is how often at least a claim reads the pending index
	// from its start.
	fullClaimEvery = time.Second
)

// next returns where the next claim starts: a time, or nil for the start
// of the index (a full claim).
func (f *frontier) next(now time.Time) *time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.from.IsZero() || now.Sub(f.lastFull) >= f.fullEvery {
		f.lastFull = now
		return nil
	}
	from := f.from
	return &from
}

// took records the oldest available_at among the fresh messages a claim
// that started at start (next's) took, nil if it took none. A full claim
// saw every pending message, so it sets the frontier; any other only moves
// it on.
func (f *frontier) took(start, oldest *time.Time) {
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
