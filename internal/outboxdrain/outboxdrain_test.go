package outboxdrain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The next look comes when about half of what is left should be done at
// the pace so far, never sooner than minLook nor later than maxLook.
func TestLooksFollowThePace(t *testing.T) {
	t0 := time.Now()
	var p paceOf
	require.Equal(t, minLook, p.next(1, 10_001, t0), "no pace yet")
	// 1,000 rows in 40 ms: 9,000 left take 360 ms, half of it is over the bound.
	require.Equal(t, maxLook, p.next(1_001, 10_001, t0.Add(40*time.Millisecond)))
	// 5,000 rows in 100 ms: 4,000 left take 80 ms; looks again in 40.
	require.Equal(t, 40*time.Millisecond, p.next(6_001, 10_001, t0.Add(140*time.Millisecond)))
	// 3,900 rows in 40 ms: 100 left take 1 ms, under the bound.
	require.Equal(t, minLook, p.next(9_901, 10_001, t0.Add(180*time.Millisecond)))
	// No progress, or past the last row: as soon as allowed.
	require.Equal(t, minLook, p.next(9_901, 10_001, t0.Add(190*time.Millisecond)))
	require.Equal(t, minLook, p.next(10_500, 10_001, t0.Add(200*time.Millisecond)))
}
