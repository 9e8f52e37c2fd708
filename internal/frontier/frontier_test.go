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
	f.Took(start, nil, nil)
	require.Nil(t, f.Next(now.Add(time.Second)), "nothing taken yet: still from the start")

	start = f.Next(now.Add(2 * time.Second))
	require.Nil(t, start)
	f.Took(start, at(-5), nil)
	require.Equal(t, at(-6), f.Next(now.Add(3*time.Second)), "the oldest taken, less the margin")

	start = f.Next(now.Add(4 * time.Second))
	f.Took(start, at(-20), nil)
	require.Equal(t, at(-6), f.Next(now.Add(5*time.Second)), "a claim from the frontier never moves it back")
	f.Took(start, at(3), nil)
	require.Equal(t, at(2), f.Next(now.Add(6*time.Second)), "but moves it on")

	start = f.Next(now.Add(13 * time.Second))
	require.Nil(t, start, "a full claim once the interval has passed")
	f.Took(start, at(-30), nil)
	require.Equal(t, at(-31), f.Next(now.Add(14*time.Second)), "a full claim saw everything: it may move the frontier back")
}

// Where the claimer sees the open transactions, the frontier stays behind
// the oldest row taken only as far as the oldest transaction open as the
// claim began, less the slack: within the margin, and never ahead of the
// oldest row. A rewind still goes back the whole margin.
func TestTheFrontierStaysBehindTheOldestOpenTransaction(t *testing.T) {
	f := frontier.New(10*time.Second, time.Hour)
	now := *at(0)
	f.Took(f.Next(now), at(-100), at(0))
	require.Equal(t, at(-100), f.Next(now), "no transaction open before the row: the frontier is the row")

	start := f.Next(now)
	f.Took(start, at(-50), at(-53))
	require.Equal(t, at(-53).Add(-frontier.Slack), *f.Next(now), "behind the oldest open transaction, less the slack")

	start = f.Next(now)
	f.Took(start, at(-40), at(-1000))
	require.Equal(t, at(-50), f.Next(now), "a transaction open for longer than the margin: the margin")

	start = f.Next(now)
	f.Took(start, at(-30), nil)
	require.Equal(t, at(-40), f.Next(now), "open transactions out of sight: the margin")

	f.Rewind(*at(-35))
	require.Equal(t, at(-45), f.Next(now), "a rewind goes back the margin")
}

// After Rewind, the next claim reads from the arrival time given, less the
// margin, however recent the last full claim; the one after it from the
// frontier again. The earliest of several rewinds wins, one later than
// the frontier changes nothing, and a full claim covers them all.
func TestRewindTakesTheNextClaimBack(t *testing.T) {
	f := frontier.New(time.Second, time.Hour)
	now := *at(0)
	f.Took(f.Next(now), at(-5), nil)
	require.Equal(t, at(-6), f.Next(now.Add(time.Second)))

	f.Rewind(*at(-60))
	require.Equal(t, at(-61), f.Next(now.Add(2*time.Second)), "a rewound frontier reads from the arrival, less the margin")
	require.Equal(t, at(-6), f.Next(now.Add(3*time.Second)), "once")

	f.Rewind(*at(-30))
	f.Rewind(*at(-50))
	f.Rewind(*at(-40))
	require.Equal(t, at(-51), f.Next(now.Add(4*time.Second)), "the earliest rewind")

	f.Rewind(*at(10))
	require.Equal(t, at(-6), f.Next(now.Add(5*time.Second)), "a rewind past the frontier changes nothing")

	f.Rewind(*at(-60))
	require.Nil(t, f.Next(now.Add(2*time.Hour)), "a full claim reads from the start anyway")
	require.Equal(t, at(-6), f.Next(now.Add(2*time.Hour+time.Second)), "and the rewind is spent")
}

// A claim that started before a Rewind and ends after it moves the
// frontier on, but the rewind still takes the next claim back: otherwise a
// key's next row would wait for the full claim.
func TestAClaimUnderWayDoesNotUndoARewind(t *testing.T) {
	f := frontier.New(time.Second, time.Hour)
	now := *at(0)
	f.Took(f.Next(now), at(-5), nil)
	start := f.Next(now.Add(time.Second))
	f.Rewind(*at(-60))
	f.Took(start, at(5), nil)
	require.Equal(t, at(-61), f.Next(now.Add(2*time.Second)))
	require.Equal(t, at(4), f.Next(now.Add(3*time.Second)), "the frontier moved on meanwhile")
}
