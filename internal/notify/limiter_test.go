package notify

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLimiterLeadsOncePerIntervalAndOwesTheRest(t *testing.T) {
	t.Parallel()
	flushed := make(chan struct{}, 10)
	l := NewLimiter(50*time.Millisecond, func() { flushed <- struct{}{} })
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
	<-flushed // the folded ones are owed a notification, and get it
	select {
	case <-flushed:
		t.Fatal("one trailing notification stands for every folded statement")
	case <-time.After(150 * time.Millisecond):
	}

	always := NewLimiter(-1, func() { t.Fatal("nothing is folded") })
	for range 3 {
		require.True(t, always.Allow())
	}
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
