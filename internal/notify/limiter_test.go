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
