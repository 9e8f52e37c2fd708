package relay_test

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// hangingPublisher is a real Watermill publisher (GoChannel) whose calls
// to the topics in hang block until release is called, as a broker that
// takes a connection and never answers: a RabbitMQ blocked by a resource
// alarm, a network path that drops packets.
type hangingPublisher struct {
	message.Publisher
	hang     map[string]bool
	released chan struct{}
	release  func() // idempotent

	mu      sync.Mutex
	hanging int // calls blocked now
	most    int // calls blocked at once, at most
}

func newHangingPublisher(t *testing.T, topics ...string) *hangingPublisher {
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { require.NoError(t, ps.Close()) })
	p := &hangingPublisher{Publisher: ps, hang: map[string]bool{}, released: make(chan struct{})}
	p.release = sync.OnceFunc(func() { close(p.released) })
	for _, topic := range topics {
		p.hang[topic] = true
	}
	return p
}

func (p *hangingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.hang[topic] {
		p.mu.Lock()
		p.hanging++
		p.most = max(p.most, p.hanging)
		p.mu.Unlock()
		<-p.released
		p.mu.Lock()
		p.hanging--
		p.mu.Unlock()
	}
	return p.Publisher.Publish(topic, msgs...)
}

// blocked returns how many calls are blocked now, and at most at once.
func (p *hangingPublisher) blocked() (now, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hanging, p.most
}

// A topic whose publish hangs does not hold up the others: the relay stops
// waiting after PublishTimeout, never records the hung messages as
// published, charges them when the broker took another topic's messages
// in the same round, makes no new call to the hung topic while one is out,
// and publishes them once the broker answers again. (A round with only
// the hung topic's rows is an outage: TestEveryPublishHangingIsAnOutage.)
func TestHungTopicIsChargedAndOthersGoOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newHangingPublisher(t, "stuck")
	b.start(t, relay.Config{
		Lease:             2 * time.Second,
		OutageBackoffFunc: func(int) time.Duration { return 5 * time.Millisecond },
		PublishTimeout:    100 * time.Millisecond,
		Publisher:         pub,
	})
	t.Cleanup(pub.release) // before the relay's Stop, should the test fail first

	var msgs []outbox.Message
	for i := range 12 {
		topic := "ok"
		if i%4 == 0 {
			topic = "stuck"
		}
		msgs = append(msgs, outbox.Message{Topic: topic, EventType: "E"})
	}
	b.write(t, msgs...)
	b.waitFor(t, "SELECT count(*) = 9 FROM /* schema */outbox WHERE topic = 'ok' AND status = 'published'")
	b.waitFor(t, "SELECT count(*) = 3 FROM /* schema */outbox WHERE topic = 'stuck' AND jsonb_array_length(errors) >= 1")
	b.waitFor(t, `SELECT bool_and(status = 'pending' AND published_at IS NULL AND attempts >= 1
		AND last_error LIKE 'publish: topic "stuck": %(Config.PublishTimeout)%') FROM /* schema */outbox WHERE topic = 'stuck'`)
	b.waitFor(t, `SELECT EXISTS (SELECT 1 FROM /* schema */outbox, jsonb_array_elements(errors) AS e
		WHERE topic = 'stuck' AND e->>'error' LIKE '%no answer from the publisher within 100ms%')`)
	_, most := pub.blocked()
	require.LessOrEqual(t, most, 2, "no new call to a hung topic: at most one per worker")

	pub.release()
	b.waitPublished(t)
	b.waitFor(t, "SELECT count(*) = 12 FROM /* schema */outbox WHERE status = 'published'")
}

// When every publish of a round hangs, it is an outage, as when the broker
// is unreachable: no attempt is charged however long it lasts (with
// MaxAttempts 1, one charge would make a row dead), the relay pauses and
// says why, and it publishes everything once the broker answers.
func TestEveryPublishHangingIsAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newHangingPublisher(t, "a", "b")
	logs := &logtest.Recorder{}
	r := b.start(t, relay.Config{
		Lease:             time.Second,
		Logger:            slog.New(logs),
		MaxAttempts:       1,
		OutageBackoffFunc: func(int) time.Duration { return 5 * time.Millisecond },
		PublishTimeout:    50 * time.Millisecond,
		Publisher:         pub,
	})
	t.Cleanup(pub.release)

	b.write(t, outbox.Message{Topic: "a", EventType: "E", OrderingKey: "k"}, outbox.Message{Topic: "b", EventType: "E"},
		outbox.Message{Topic: "a", EventType: "E", OrderingKey: "k"})
	rounds := regexp.MustCompile(`\((\d+) rounds failed\)`)
	require.Eventually(t, func() bool {
		err := r.BrokerErr()
		if err == nil {
			return false
		}
		m := rounds.FindStringSubmatch(err.Error())
		n, _ := strconv.Atoi(m[1])
		return n >= 10
	}, 30*time.Second, 5*time.Millisecond)
	require.ErrorContains(t, r.BrokerErr(), "Config.PublishTimeout")
	b.waitFor(t, "SELECT bool_and(attempts <= 1 AND status <> 'dead' AND errors = '[]') FROM /* schema */outbox")

	pub.release()
	b.waitPublished(t)
	b.waitFor(t, "SELECT count(*) = 3 FROM /* schema */outbox WHERE status = 'published'")
	require.NoError(t, r.BrokerErr())
	require.Equal(t, 1, logs.Count(slog.LevelError, "the broker is unreachable"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "the broker is reachable again"))
	require.Zero(t, logs.Count(slog.LevelWarn, "publish failed"))
}

// Stop does not wait for a hung publish past its context: the call's rows
// go back to pending with their attempt refunded, and Stop says that the
// call is still out. Once the publisher returns, nothing is left running.
func TestStopDoesNotWaitForAHungPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newHangingPublisher(t, "t")
	r := b.start(t, relay.Config{Lease: time.Minute, PublishTimeout: 30 * time.Second, Publisher: pub})
	t.Cleanup(pub.release)
	b.write(t, outbox.Message{Topic: "t", EventType: "E"})
	require.Eventually(t, func() bool { now, _ := pub.blocked(); return now == 1 }, 30*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	stopping := time.Now()
	err := r.Stop(ctx)
	require.Less(t, time.Since(stopping), 10*time.Second, "Stop waited for the hung publish (PublishTimeout is 30s)")
	require.ErrorContains(t, err, "stopped, but 1 Publish calls that got no answer are still running")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	b.waitFor(t, "SELECT status = 'pending' AND attempts = 0 AND errors = '[]' FROM /* schema */outbox")

	pub.release()
	require.NoError(t, r.Stop(context.Background()), "the call returned: nothing left running")
}
