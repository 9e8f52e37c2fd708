package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pgbox/pgbox/internal/telemetry"
)

// errStopping ends the wait for a Publish call when Stop's deadline has
// passed: the call's messages go back unpublished, their attempt refunded.
var errStopping = errors.New("the relay is stopping: stopped waiting for the publish")

// hungError is a Publish call that did not return within
// Config.PublishTimeout. Its messages count as not published: the call may
// still deliver them, which consumers dedupe, but the relay never records
// them as published on its word.
type hungError struct {
	timeout time.Duration
	topic   string
}

func (e *hungError) Error() string {
	return fmt.Sprintf("topic %q: no answer from the publisher within %s (Config.PublishTimeout); stopped waiting, the messages count as not published",
		e.topic, e.timeout)
}

// stuckError is a Publish call not made because earlier calls to its topic
// got no answer and have not returned since: the relay piles no more calls
// onto a topic that hangs.
type stuckError struct {
	hung  int
	topic string
}

func (e *stuckError) Error() string {
	return fmt.Sprintf("topic %q: %d earlier Publish calls got no answer (Config.PublishTimeout) and have not returned: no new call to the topic until they do",
		e.topic, e.hung)
}

// stuckAfter is how many PublishTimeouts a topic may hang (a call given
// up on that has not returned) before it is reported: logged at error,
// named in BrokerErr, counted in the topics-stuck gauge.
const stuckAfter = 3

// calls runs Publish calls on goroutines of their own, so that the relay
// can stop waiting for one that hangs: Watermill's Publish takes no
// context, so a hung call cannot be cancelled, only abandoned. A worker's
// calls to a topic, one after another, share a goroutine (see run). It
// counts the abandoned calls, by topic, until they return. A topic with
// one out gets no new call (see stuck), so there are at most as many as
// the relay has workers per topic, and Stop waits for them. A topic that
// hangs for stuckAfter PublishTimeouts is an error, said once, again every
// remindEvery while it lasts (unless a broker outage, which says more, is
// declared), and once more when it ends.
type calls struct {
	logger      *slog.Logger
	quiet       func() bool // an outage is declared: its log speaks for the topics
	remindEvery time.Duration
	tel         *telemetry.Relay
	timeout     time.Duration

	mu      sync.Mutex
	hung    map[string]*hungTopic // topics with calls abandoned that have not returned
	changed chan struct{}         // closed and replaced when a hung call returns
}

// hungTopic is a topic with abandoned calls out.
type hungTopic struct {
	calls    int       // abandoned calls that have not returned
	since    time.Time // when the first was abandoned
	reported bool      // it has hung past the bound
	logged   bool      // and that has been logged
	timer    *time.Timer
}

func newCalls(timeout time.Duration, logger *slog.Logger, tel *telemetry.Relay, quiet func() bool) *calls {
	return &calls{logger: logger, quiet: quiet, remindEvery: time.Minute, tel: tel, timeout: timeout,
		hung: map[string]*hungTopic{}, changed: make(chan struct{})}
}

// errAbandoned is what a call of a sequence returns to its goroutine once
// the worker has given up on it: the worker has taken the rest over, and
// the goroutine ends without a further step.
var errAbandoned = errors.New("relay: the worker gave up waiting for this call")

// caller makes one call of a sequence (see calls.run): send, which
// publishes msgs messages, whose spans end ends. It returns send's error,
// errStopping if Stop's deadline has passed (no call is made), or
// errAbandoned if the worker gave up waiting for it meanwhile (and ended
// its spans).
type caller func(msgs int, end func(errOf func(i int) error), send func() error) error

// sequence is the calls of one run, made one after another; its fields
// but done are guarded by calls.mu.
type sequence struct {
	topic     string
	inFlight  bool      // a call has been made and has not returned
	started   time.Time // when it was made
	msgs      int       // its messages
	end       func(errOf func(i int) error)
	stopping  bool // Stop's deadline has passed: make no call
	abandoned bool // the worker gave up on the call in flight
	done      chan struct{}
}

// stuck returns a *stuckError while an abandoned call to topic is out, or
// nil.
func (c *calls) stuck(topic string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.hung[topic]; h != nil {
		return &stuckError{hung: h.calls, topic: topic}
	}
	return nil
}

// run runs steps on a goroutine of its own, where it makes its calls to
// topic, one after another, through the caller it is given; and waits for
// it, each call up to the timeout, or until stop is closed. It returns nil
// once steps has returned, or the error of the call it gave up on (a
// *hungError, or errStopping), which is then the last steps made: that
// call goes on alone, and the caller carries on from there. While a
// call is out, steps alone touches what it shares with the caller.
func (c *calls) run(topic string, stop <-chan struct{}, steps func(call caller)) error {
	s := &sequence{topic: topic, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		steps(func(msgs int, end func(errOf func(i int) error), send func() error) error {
			if !c.begin(s, msgs, end) {
				return errStopping
			}
			start := time.Now()
			err := send()
			if !c.returned(s, start, err) {
				return errAbandoned
			}
			return err
		})
	}()
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	for {
		select {
		case <-s.done:
			return nil
		case <-timer.C:
			if wait := c.giveUp(s, time.Now(), false); wait > 0 {
				timer.Reset(wait)
				continue
			}
			c.logger.Warn("relay: a Publish call got no answer; stopped waiting, its messages count as not published, and the topic gets no new call until it returns",
				slog.String("topic", topic), slog.Duration("publish_timeout", c.timeout), slog.Int("messages", s.msgs))
			return c.ended(s, &hungError{timeout: c.timeout, topic: topic})
		case <-stop:
			stop = nil
			if c.giveUp(s, time.Now(), true) == 0 {
				return c.ended(s, errStopping)
			}
		}
	}
}

// begin marks a call of s made, with its messages and spans, unless Stop's
// deadline has passed; it reports whether it did.
func (c *calls) begin(s *sequence, msgs int, end func(errOf func(i int) error)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.stopping {
		return false
	}
	s.inFlight, s.started, s.msgs, s.end = true, time.Now(), msgs, end
	return true
}

// giveUp gives up on s's call in flight if it has been out for the
// timeout, or at once if stopping (Stop's deadline has passed; no new call
// is made then), and counts it abandoned. It returns how long to wait
// before asking again, or 0 if it gave up.
func (c *calls) giveUp(s *sequence, now time.Time, stopping bool) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.stopping = s.stopping || stopping
	if !s.inFlight {
		return c.timeout // between calls: the next one starts its own wait
	}
	if left := s.started.Add(c.timeout).Sub(now); left > 0 && !stopping {
		return left
	}
	s.abandoned = true
	h := c.hung[s.topic]
	if h == nil {
		h = &hungTopic{since: now}
		h.timer = time.AfterFunc(stuckAfter*c.timeout, func() { c.overdue(s.topic, h) })
		c.hung[s.topic] = h
	}
	h.calls++
	return 0
}

// ended ends the spans of s's call given up on with err, and returns err.
func (c *calls) ended(s *sequence, err error) error {
	s.end(func(int) error { return err })
	return err
}

// returned marks s's call in flight returned, made at start, with err,
// and reports whether the worker was still waiting for it. A call given
// up on is counted back in, and its late answer logged.
func (c *calls) returned(s *sequence, start time.Time, err error) bool {
	c.mu.Lock()
	s.inFlight = false
	if !s.abandoned {
		c.mu.Unlock()
		return true
	}
	var over *hungTopic // the topic hangs no more
	h := c.hung[s.topic]
	if h.calls--; h.calls == 0 {
		over = h
		h.timer.Stop()
		delete(c.hung, s.topic)
		if h.reported {
			c.tel.TopicsStuck(c.reportedLocked())
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	attrs := []any{slog.String("topic", s.topic), slog.Duration("after", time.Since(start).Round(time.Millisecond))}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if over != nil && over.reported {
		attrs = append(attrs, slog.Duration("stuck_for", time.Since(over.since).Round(time.Millisecond)))
	}
	c.logger.Info("relay: a Publish call given up on has returned; the topic is published to again", attrs...)
	return false
}

// overdue reports topic, hung since h.since: its first call given up on
// has not returned for stuckAfter PublishTimeouts, or for another
// remindEvery since it was last reported.
func (c *calls) overdue(topic string, h *hungTopic) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hung[topic] != h {
		return // it returned as the timer fired
	}
	if !h.reported {
		h.reported = true
		c.tel.TopicsStuck(c.reportedLocked())
	}
	h.timer.Reset(c.remindEvery)
	if c.quiet() {
		return
	}
	msg := "relay: a topic has not answered: Publish calls to it got no answer (Config.PublishTimeout) and have not returned; no new call is made to it until they do, and its rows wait, uncharged: check the broker, or the publisher's own timeouts"
	if h.logged {
		msg = "relay: a topic still has not answered; its rows still wait"
	}
	h.logged = true
	c.logger.Error(msg, slog.String("topic", topic), slog.Duration("stuck_for", time.Since(h.since).Round(time.Second)),
		slog.Int("calls", h.calls), slog.Duration("publish_timeout", c.timeout))
}

// reportedLocked counts the topics hung past the bound; c.mu is held.
func (c *calls) reportedLocked() int {
	n := 0
	for _, h := range c.hung {
		if h.reported {
			n++
		}
	}
	return n
}

// Err names the topics hung past the bound, or returns nil.
func (c *calls) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for topic, h := range c.hung {
		if h.reported {
			errs = append(errs, fmt.Errorf("topic %q has not answered for %s: %d Publish calls got no answer within %s (Config.PublishTimeout) and have not returned; its rows wait, uncharged",
				topic, time.Since(h.since).Round(time.Second), h.calls, c.timeout))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// close stops reporting the topics that hang: the relay has stopped.
func (c *calls) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.hung {
		h.timer.Stop()
	}
}

// wait waits until no abandoned call is out, or ctx ends; it returns how
// many are still out.
func (c *calls) wait(ctx context.Context) int {
	for {
		c.mu.Lock()
		hung, changed := 0, c.changed
		for _, h := range c.hung {
			hung += h.calls
		}
		c.mu.Unlock()
		if hung == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return hung
		case <-changed:
		}
	}
}
