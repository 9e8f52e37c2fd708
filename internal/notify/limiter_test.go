package notify

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Concurrent senders after a quiet interval: one leads, the folded ones
// are owed a notification and get it, and then the Limiter goes quiet.
func TestLimiterLeadsOnceAndOwesTheRest(t *testing.T) {
	t.Parallel()
	const interval = 50 * time.Millisecond
	var flushes atomic.Int32
	l := NewLimiter(interval, func() { flushes.Add(1) })
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if l.Allow() {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, allowed.Load(), "concurrent senders within one interval lead once")
	require.Eventually(t, func() bool { return flushes.Load() > 0 }, 10*time.Second, time.Millisecond,
		"the folded ones are owed a notification")
	time.Sleep(4 * interval)
	n := flushes.Load()
	require.LessOrEqual(t, n, int32(2), "a burst is announced an interval after it starts and, for late commits, once more")
	time.Sleep(4 * interval)
	require.Equal(t, n, flushes.Load(), "nothing is owed once the senders are quiet")

	require.True(t, l.Allow(), "after a quiet interval a sender leads again")

	always := NewLimiter(-1, func() { t.Fatal("nothing is folded") })
	for range 3 {
		require.True(t, always.Allow())
	}
}

// Under a steady stream of statements none leads after the first (no
// business commit carries the NOTIFY and its lock), the owed notification
// goes out about once an interval, and the last one an interval after the
// last statement, by when its transaction has committed.
func TestLimiterUnderSteadyLoadOwesEveryInterval(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	var (
		flushes   atomic.Int32
		lastFlush atomic.Int64
	)
	l := NewLimiter(interval, func() {
		flushes.Add(1)
		lastFlush.Store(time.Now().UnixNano())
	})
	var allowed int
	var lastAllow time.Time
	for start := time.Now(); time.Since(start) < 6*interval; time.Sleep(2 * time.Millisecond) {
		if l.Allow() {
			allowed++
		}
		lastAllow = time.Now()
	}
	require.Equal(t, 1, allowed, "only the first statement of a steady stream leads; a leading edge every interval puts NOTIFYs in business commits")
	require.GreaterOrEqual(t, flushes.Load(), int32(3), "about 6 expected; a trailing edge put off by every statement sends none until the stream stops")
	time.Sleep(3 * interval)
	require.GreaterOrEqual(t, time.Unix(0, lastFlush.Load()).Sub(lastAllow), interval,
		"the last notification comes an interval after the last folded statement")
}

// Committed notifies at once when nothing was sent for an interval (here an
// hour, so only the leading edge can deliver it), and folds what follows
// into one notification sent when the interval is up.
func TestCommittedNotifiesAtOnceThenFolds(t *testing.T) {
	t.Parallel()
	flushed := make(chan struct{}, 10)
	l := NewLimiter(time.Hour, func() { flushed <- struct{}{} })
	l.Committed()
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("the first committed rows must be announced at once, not an interval later")
	}
	l.Committed()
	l.Committed()
	select {
	case <-flushed:
		t.Fatal("rows committed less than an interval after the last notification wait for the next")
	case <-time.After(100 * time.Millisecond):
	}

	short := NewLimiter(20*time.Millisecond, func() { flushed <- struct{}{} })
	short.Committed()
	<-flushed
	for range 5 {
		short.Committed()
	}
	<-flushed // the folded calls get one notification, after their commits
	select {
	case <-flushed:
		t.Fatal("one notification stands for every folded call")
	case <-time.After(100 * time.Millisecond):
	}

	always := NewLimiter(-1, func() { flushed <- struct{}{} })
	always.Committed()
	always.Committed()
	<-flushed
	<-flushed
}

// Under a steady stream of commits, Committed keeps notifying about once an
// interval: a notification is never put off by the commits that follow it.
func TestCommittedDoesNotStarveUnderSteadyLoad(t *testing.T) {
	t.Parallel()
	var flushes atomic.Int32
	l := NewLimiter(20*time.Millisecond, func() { flushes.Add(1) })
	for range 100 { // 500ms of a commit every 5ms
		l.Committed()
		time.Sleep(5 * time.Millisecond)
	}
	require.GreaterOrEqual(t, flushes.Load(), int32(5), "about 25 expected; a trailing edge reset by every call sends 1")
}
