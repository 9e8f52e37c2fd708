// Package recent remembers the ids of the last messages an inbox knows to
// be committed, with their payload hashes, so that a redelivery of one can
// be answered as a duplicate without asking the database.
//
// It only ever holds ids whose rows are committed, so the worst it can do is
// send a delivery to the database that it need not have; it can never turn
// away a message that was not stored. Eviction is first in, first out: a
// storm of redeliveries is of recent messages.
package recent

import (
	"crypto/sha256"
	"sync"
)

// Hash is a payload's SHA-256.
type Hash = [sha256.Size]byte

// Set is a bounded set of committed message ids. A nil *Set remembers
// nothing. It is safe for concurrent use.
type Set struct {
	mu   sync.Mutex
	ids  map[string]Hash
	ring []string // insertion order; ring[next] is evicted next once full
	next int
}

// New returns a Set of at most size ids, or nil (remember nothing) when size
// is not positive.
func New(size int) *Set {
	if size <= 0 {
		return nil
	}
	return &Set{ids: make(map[string]Hash, size), ring: make([]string, 0, size)}
}

// Get returns the payload hash stored under id, if id is remembered.
func (s *Set) Get(id string) (Hash, bool) {
	if s == nil {
		return Hash{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.ids[id]
	return h, ok
}

// Add remembers that id is newly committed with a payload of hash,
// forgetting the oldest id if the set is full.
func (s *Set) Add(id string, hash Hash) { s.add(id, hash, true) }

// Fill remembers that id, found already committed, has a payload of hash,
// but only while the set has room. Such an id was stored before the ones
// the set holds: were it to push out the oldest of them, every redelivery
// the set missed would make it miss another, and a storm of redeliveries of
// exactly as many recent ids as it holds would go to the database more and
// more.
func (s *Set) Fill(id string, hash Hash) { s.add(id, hash, false) }

func (s *Set) add(id string, hash Hash, evict bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ids[id]; ok {
		return
	}
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, id)
	} else if !evict {
		return
	} else {
		delete(s.ids, s.ring[s.next])
		s.ring[s.next] = id
		s.next = (s.next + 1) % len(s.ring)
	}
	s.ids[id] = hash
}

// Len returns how many ids are remembered.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}
