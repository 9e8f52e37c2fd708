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
// turn. With a Limiter, a sender's statement notifies only after a quiet
// interval, when no statement has asked for an interval (the leading edge,
// which wakes an idle listener at once). A statement that was folded leaves
// the Limiter owing a notification, which it sends on its own, through
// flush: an interval after the first folded statement, then every interval
// while statements keep being folded, and a last time an interval after the
// last one, by when the folded statements have committed. So every row is
// announced within about an interval, unless its transaction stays open
// longer, and then polling finds it: notifications stay a hint.
//
// Under steady load no statement notifies: the business commits that carry
// the rows never take the lock, and the notifications, sent with an
// asynchronous commit (notify.Send), hold it only briefly.
//
// A sender that knows when its rows have committed (an autocommitted
// statement has returned) should call Committed instead: it keeps the
// NOTIFY out of the sender's own transaction altogether.
type Limiter struct {
	flush    func()
	interval time.Duration
	asked    atomic.Int64 // unix nanoseconds of the last Allow

	mu     sync.Mutex
	timer  *time.Timer // the owed notification, when armed
	folded bool        // a statement was folded since the timer was armed or last fired

	sentMu sync.Mutex
	sent   time.Time // when Committed's last notification was sent
	due    bool      // Committed has a notification scheduled
}

// NewLimiter returns a Limiter that lets a statement after a quiet interval
// notify, and calls flush to send a notification owed for folded ones. A
// negative interval lets every statement notify.
func NewLimiter(interval time.Duration, flush func()) *Limiter {
	return &Limiter{flush: flush, interval: interval}
}

// Allow reports whether the statement about to run should notify. When it
// should not, its notification is folded into an owed one.
func (l *Limiter) Allow() bool {
	if l.interval < 0 {
		return true
	}
	now := time.Now().UnixNano()
	if now-l.asked.Swap(now) >= int64(l.interval) {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer == nil {
		l.timer = time.AfterFunc(l.interval, l.owed)
	} else {
		l.folded = true
	}
	return false
}

// owed sends the owed notification, and keeps one owed an interval later
// if statements were folded since the last: their transactions may not
// have committed yet.
func (l *Limiter) owed() {
	l.mu.Lock()
	if l.folded {
		l.folded = false
		l.timer.Reset(l.interval)
	} else {
		l.timer = nil
	}
	l.mu.Unlock()
	l.flush()
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
