package notify

import (
	"sync"
	"sync/atomic"
	"time"
)

// NotifyIntervalDefault is how often, at most, a sender announces new rows
// on a channel by default.
const NotifyIntervalDefault = 10 * time.Millisecond

// Limiter folds a sender's notifications. NOTIFY takes a lock that every
// notifying transaction holds from its commit until its WAL is flushed, so
// one NOTIFY per transaction makes all of a busy service's commits wait in
// turn. With a Limiter, a sender's statement notifies only if no other did
// in the last interval (the leading edge); a statement that was folded
// leaves the Limiter owing a notification, which it sends on its own (the
// trailing edge, through flush) once an interval has passed without more
// folding, by when the folded statements have committed. So every row is
// announced within about an interval, unless its transaction stays open
// longer, and then polling finds it: notifications stay a hint.
//
// A sender that knows when its rows have committed (an autocommitted
// statement has returned) should call Committed instead: it keeps the
// NOTIFY out of the sender's own transaction altogether.
type Limiter struct {
	flush    func()
	interval time.Duration
	last     atomic.Int64 // unix nanoseconds of the last leading-edge notification

	mu    sync.Mutex
	timer *time.Timer // the owed trailing notification, when armed

	sentMu sync.Mutex
	sent   time.Time // when Committed's last notification was sent
	due    bool      // Committed has a notification scheduled
}

// NewLimiter returns a Limiter that lets one statement per interval
// notify, and calls flush to send a notification owed for folded ones. A
// negative interval lets every statement notify.
func NewLimiter(interval time.Duration, flush func()) *Limiter {
	return &Limiter{flush: flush, interval: interval}
}

// Allow reports whether the statement about to run should notify. When it
// should not, its notification is folded into the owed trailing one.
func (l *Limiter) Allow() bool {
	if l.interval < 0 {
		return true
	}
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last >= int64(l.interval) && l.last.CompareAndSwap(last, now) {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer == nil {
		l.timer = time.AfterFunc(l.interval, l.flush)
	} else {
		l.timer.Reset(l.interval) // an interval after the last folded statement
	}
	return false
}

// Committed announces rows that have committed: it sends a notification
// itself, through flush on a goroutine of its own, at once unless the last
// one it sent is less than an interval old, and then when that interval is
// up. Calls while one is scheduled fold into it: it is sent after their
// rows committed, so it announces them too. A negative interval sends one
// for every call.
//
// Unlike a NOTIFY in the sender's statement (Allow), which PostgreSQL sends
// at the statement's commit under a lock that every notifying transaction
// holds through its WAL flush, this adds nothing to the sender's commit and
// queues none of its business commits behind others: the statement
// commits like any other, and flush (notify.Send) commits asynchronously.
// It costs a round trip off the caller's path.
func (l *Limiter) Committed() {
	if l.interval < 0 {
		go l.flush()
		return
	}
	l.sentMu.Lock()
	defer l.sentMu.Unlock()
	if l.due {
		return
	}
	l.due = true
	time.AfterFunc(max(time.Until(l.sent.Add(l.interval)), 0), func() {
		l.sentMu.Lock()
		l.due = false
		l.sent = time.Now()
		l.sentMu.Unlock()
		l.flush()
	})
}
