package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
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

// calls runs Publish calls, each on a goroutine of its own, so that the
// relay can stop waiting for one that hangs: Watermill's Publish takes no
// context, so a hung call cannot be cancelled, only abandoned. It counts
// the abandoned calls, by topic, until they return. A topic with one out
// gets no new call (see stuck), so there are at most as many as the relay
// has workers per topic, and Stop waits for them.
type calls struct {
	logger  *slog.Logger
	timeout time.Duration

	mu      sync.Mutex
	hung    map[string]int // calls abandoned that have not returned, by topic
	changed chan struct{}  // closed and replaced when a hung call returns
}

func newCalls(timeout time.Duration, logger *slog.Logger) *calls {
	return &calls{logger: logger, timeout: timeout, hung: map[string]int{}, changed: make(chan struct{})}
}

// call is one Publish call; returned and abandoned are guarded by calls.mu.
type call struct {
	done      chan error // receives Publish's error, once
	returned  bool
	abandoned bool
}

// stuck returns a *stuckError while an abandoned call to topic is out, or
// nil.
func (c *calls) stuck(topic string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.hung[topic]; n > 0 {
		return &stuckError{hung: n, topic: topic}
	}
	return nil
}

// publish calls pub.Publish(topic, msgs...) and waits for it up to the
// timeout, or until stop is closed. It returns the call's error, or a
// *hungError (timeout) or errStopping (stop), after which the call goes on
// alone.
func (c *calls) publish(pub message.Publisher, topic string, msgs []*message.Message, stop <-chan struct{}) error {
	cl := &call{done: make(chan error, 1)}
	go c.run(cl, pub, topic, msgs)
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	var err error
	select {
	case err := <-cl.done:
		return err
	case <-timer.C:
		err = &hungError{timeout: c.timeout, topic: topic}
	case <-stop:
		err = errStopping
	}
	if !c.abandon(cl, topic) { // it answered as the wait ended: take its answer
		return <-cl.done
	}
	if !errors.Is(err, errStopping) {
		c.logger.Warn("relay: a Publish call got no answer; stopped waiting, its messages count as not published, and the topic gets no new call until it returns",
			slog.String("topic", topic), slog.Duration("publish_timeout", c.timeout), slog.Int("messages", len(msgs)))
	}
	return err
}

// run makes cl's call and hands its error over; a call given up on is
// counted back in, and its late answer logged.
func (c *calls) run(cl *call, pub message.Publisher, topic string, msgs []*message.Message) {
	start := time.Now()
	err := pub.Publish(topic, msgs...)
	c.mu.Lock()
	cl.returned = true
	abandoned := cl.abandoned
	if abandoned {
		if c.hung[topic]--; c.hung[topic] == 0 {
			delete(c.hung, topic)
		}
		close(c.changed)
		c.changed = make(chan struct{})
	}
	c.mu.Unlock()
	cl.done <- err
	if abandoned {
		attrs := []any{slog.String("topic", topic), slog.Duration("after", time.Since(start).Round(time.Millisecond))}
		if err != nil {
			attrs = append(attrs, slog.String("error", err.Error()))
		}
		c.logger.Info("relay: a Publish call given up on has returned; the topic is published to again", attrs...)
	}
}

// abandon marks cl given up on and counts it, unless it has returned; it
// reports whether it did.
func (c *calls) abandon(cl *call, topic string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl.returned {
		return false
	}
	cl.abandoned = true
	c.hung[topic]++
	return true
}

// wait waits until no abandoned call is out, or ctx ends; it returns how
// many are still out.
func (c *calls) wait(ctx context.Context) int {
	for {
		c.mu.Lock()
		hung, changed := 0, c.changed
		for _, n := range c.hung {
			hung += n
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
