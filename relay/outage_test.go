package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

func TestIsUnreachable(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		relay.ErrBrokerUnreachable,
		fmt.Errorf("publish: %w", relay.ErrBrokerUnreachable),
		fmt.Errorf("failed to publish: %w", context.DeadlineExceeded),
		&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED},
		fmt.Errorf("write: %w", syscall.EPIPE),
		io.ErrUnexpectedEOF,
	} {
		require.True(t, relay.IsUnreachable(err), "%v", err)
	}
	for _, err := range []error{
		nil,
		errors.New("message exceeds the broker's limit"),
		errors.New("not connected"), // a publisher's own words: wrap ErrBrokerUnreachable
	} {
		require.False(t, relay.IsUnreachable(err), "%v", err)
	}
}

// A broker that answers every publish with an unreachable error pauses the
// relay: its rows keep their attempts however long it lasts (MaxAttempts
// 1 would make each dead at its first charged failure), and are published
// once the broker answers. A row whose publish fails so after another of
// its round went out leaves the relay in doubt, uncharged, until the next
// round probes the broker: that probe reaches it, so the failure was the
// row's own and it is charged, here dead.
//
// The same holds for a relay.ResultPublisher, whose calls carry a topic's
// rows of a batch and report each one's result.
func TestUnreachableBrokerPausesWithoutCharging(t *testing.T) {
	t.Parallel()
	t.Run("one message per call", func(t *testing.T) {
		t.Parallel()
		testUnreachableBroker(t, func(p message.Publisher) message.Publisher { return p })
	})
	t.Run("ResultPublisher", func(t *testing.T) {
		t.Parallel()
		var results *perMessage
		testUnreachableBroker(t, func(p message.Publisher) message.Publisher {
			results = &perMessage{Publisher: p}
			return results
		})
		require.Greater(t, results.largestCall(), 1, "a call carries a batch's rows")
	})
}

// testUnreachableBroker is TestUnreachableBrokerPausesWithoutCharging with
// the publisher wrap makes of the broker.
func testUnreachableBroker(t *testing.T, wrap func(message.Publisher) message.Publisher) {
	b := setup(t)
	var down atomic.Bool
	down.Store(true)
	var failed atomic.Int64
	pub := &recorder{fail: func(topic string, _ *message.Message) error {
		if down.Load() || topic == "refused" {
			failed.Add(1)
			return fmt.Errorf("dial: %w", relay.ErrBrokerUnreachable)
		}
		return nil
	}}
	logs := &logtest.Recorder{}
	r := b.start(t, relay.Config{
		// Batches of 2 and one worker, so that the rounds are known (below).
		BatchSize:         2,
		Logger:            slog.New(logs),
		MaxAttempts:       1,
		OutageBackoffFunc: func(int) time.Duration { return 5 * time.Millisecond },
		Publisher:         wrap(pub),
		Workers:           1,
	})
	ids := b.write(t, outbox.Message{Topic: "t", EventType: "E"}, outbox.Message{Topic: "t", EventType: "E"})
	require.Eventually(t, func() bool { return failed.Load() >= 20 }, 30*time.Second, time.Millisecond)
	require.ErrorIs(t, r.BrokerErr(), relay.ErrBrokerUnreachable)
	b.waitFor(t, "SELECT count(*) = 2 FROM /* schema */outbox WHERE attempts <= 1 AND status <> 'dead' AND errors = '[]'")

	down.Store(false)
	b.waitPublished(t)
	require.Equal(t, strs(ids), pub.published())
	require.NoError(t, r.BrokerErr())
	require.Equal(t, 1, logs.Count(slog.LevelError, "the broker is unreachable"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "the broker is reachable again"))
	require.Zero(t, logs.Count(slog.LevelWarn, "publish failed; will retry"))

	// The first round takes "ok" and "refused", in commit order: "ok" goes
	// out, "refused" fails unreachable, and goes back uncharged. The probe
	// takes the two later "ok" rows (older than "refused", handed back) and
	// publishes them: the broker answers, so "refused" is charged, and with
	// MaxAttempts 1 it is dead.
	b.write(t, outbox.Message{Topic: "ok", EventType: "E"}, outbox.Message{Topic: "refused", EventType: "E"},
		outbox.Message{Topic: "ok", EventType: "E"}, outbox.Message{Topic: "ok", EventType: "E"})
	b.waitFor(t, "SELECT count(*) = 1 FROM /* schema */outbox WHERE topic = 'refused' AND status = 'dead' AND attempts = 1")
	b.waitFor(t, "SELECT count(*) = 3 FROM /* schema */outbox WHERE topic = 'ok' AND status = 'published'")
	require.NoError(t, r.BrokerErr())
	require.Equal(t, 1, logs.Count(slog.LevelWarn, "a publish failed after others of its round went out"))
	require.Equal(t, 1, logs.Count(slog.LevelError, "the broker is unreachable"), "no outage declared: the probe reached the broker")
}

// While the broker stays unreachable the relay says so again at an
// interval (a minute, here 50ms), with how long it has been down and how
// many rounds failed, rather than on every failed round; and once when it
// is over.
func TestOutageIsLoggedAgainWhileItLasts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var down atomic.Bool
	down.Store(true)
	var failed atomic.Int64
	pub := &recorder{fail: func(string, *message.Message) error {
		if down.Load() {
			failed.Add(1)
			return fmt.Errorf("dial: %w", relay.ErrBrokerUnreachable)
		}
		return nil
	}}
	logs := &logtest.Recorder{}
	const remind = 50 * time.Millisecond
	r := b.newRelay(t, relay.Config{
		Logger:            slog.New(logs),
		OutageBackoffFunc: func(int) time.Duration { return 5 * time.Millisecond },
		Publisher:         pub,
	})
	relay.SetOutageRemindEvery(r, remind)
	require.NoError(t, r.Start(context.Background()))
	b.write(t, outbox.Message{Topic: "t", EventType: "E"})

	require.Eventually(t, func() bool { return logs.Count(slog.LevelError, "the broker is still unreachable") >= 3 }, 30*time.Second, time.Millisecond)
	down.Store(false)
	b.waitPublished(t)

	require.Equal(t, 1, logs.Count(slog.LevelError, "the broker is unreachable; publishing is paused"))
	reminders := logs.Records(slog.LevelError, "the broker is still unreachable; publishing is still paused")
	require.Less(t, int64(len(reminders)), failed.Load(), "not once per failed round")
	lastProbes := int64(0)
	for i, rec := range reminders {
		attrs := map[string]slog.Value{}
		rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		require.Contains(t, attrs, "down_for")
		require.Contains(t, attrs["error"].String(), "broker unreachable")
		require.Greater(t, attrs["probes"].Int64(), lastProbes)
		lastProbes = attrs["probes"].Int64()
		if i > 0 { // a record's time is read a moment after the relay's own reading: allow for it
			require.GreaterOrEqual(t, rec.Time.Sub(reminders[i-1].Time), remind*9/10, "reminders at least the interval apart")
		}
	}
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "the broker is reachable again"))
}

// A broker that flaps, dying in the middle of a round again and again,
// charges no row: each time, the round is in doubt and the probe after it
// finds the broker gone, so the rows of the failed calls stay uncharged.
// With MaxAttempts 1, a single charge would make a row dead. Calls 2 and 3
// of every 4 fail: the second mid-round, the third as the probe.
func TestAFlappingBrokerChargesNoRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	pub := &recorder{fail: func(string, *message.Message) error {
		if n := calls.Add(1); n%4 == 2 || n%4 == 3 {
			return fmt.Errorf("write: %w", syscall.ECONNRESET)
		}
		return nil
	}}
	logs := &logtest.Recorder{}
	b.start(t, relay.Config{
		BatchSize:         5,
		Logger:            slog.New(logs),
		MaxAttempts:       1,
		OutageBackoffFunc: func(int) time.Duration { return 5 * time.Millisecond },
		Publisher:         pub,
		Workers:           1,
	})
	var msgs []outbox.Message
	for range 20 {
		msgs = append(msgs, outbox.Message{Topic: "t", EventType: "E"})
	}
	ids := b.write(t, msgs...)
	b.waitPublished(t)
	b.waitFor(t, "SELECT bool_and(status = 'published' AND errors = '[]') FROM /* schema */outbox")
	require.ElementsMatch(t, strs(ids), pub.published())
	require.GreaterOrEqual(t, logs.Count(slog.LevelError, "the broker is unreachable"), 5, "every flap is an outage")
	require.Zero(t, logs.Count(slog.LevelWarn, "publish failed; will retry"))
}
