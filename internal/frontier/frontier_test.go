package frontier_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/frontier"
)

func at(s int) *time.Time {
	t := time.Unix(1_000_000+int64(s), 0)
	return &t
}

// A frontier starts at the index's start, follows the oldest row each claim
// took (less the margin), never goes back on a claim from the frontier,
// and has a claim read from the start again every full-claim interval,
// which may move it back.
func TestTheFrontierFollowsTheClaims(t *testing.T) {
	f := frontier.New(time.Second, 10*time.Second)
	now := *at(0)

	start := f.Next(now)
	require.Nil(t, start, "the first claim reads from the start")
	f.Took(start, nil)
	require.Nil(t, f.Next(now.Add(time.Second)), "nothing taken yet: still from the start")

	start = f.Next(now.Add(2 * time.Second))
	require.Nil(t, start)
	f.Took(start, at(-5))
	require.Equal(t, at(-6), f.Next(now.Add(3*time.Second)), "the oldest taken, less the margin")

	start = f.Next(now.Add(4 * time.Second))
	f.Took(start, at(-20))
	require.Equal(t, at(-6), f.Next(now.Add(5*time.Second)), "a claim from the frontier never moves it back")
	f.Took(start, at(3))
	require.Equal(t, at(2), f.Next(now.Add(6*time.Second)), "but moves it on")

	start = f.Next(now.Add(13 * time.Second))
	require.Nil(t, start, "a full claim once the interval has passed")
	f.Took(start, at(-30))
	require.Equal(t, at(-31), f.Next(now.Add(14*time.Second)), "a full claim saw everything: it may move the frontier back")
}

// After Rewind, the next claim reads from the start, however recent the
// last full claim; the one after it from the frontier again.
func TestRewindMakesTheNextClaimFull(t *testing.T) {
	f := frontier.New(time.Second, time.Hour)
	now := *at(0)
	start := f.Next(now)
	f.Took(start, at(-5))
	require.Equal(t, at(-6), f.Next(now.Add(time.Second)))

	f.Rewind()
	require.Nil(t, f.Next(now.Add(2*time.Second)), "a rewound frontier reads from the start")
	require.Equal(t, at(-6), f.Next(now.Add(3*time.Second)), "once")
}
