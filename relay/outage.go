package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/pgbox/pgbox/internal/backoff"
	"github.com/pgbox/pgbox/internal/telemetry"
)

// ErrBrokerUnreachable marks a publish error as a broker outage rather than
// a failure of the messages. A publisher (or a wrapper around one) whose
// errors IsUnreachable does not recognise wraps it:
// fmt.Errorf("...: %w", relay.ErrBrokerUnreachable).
var ErrBrokerUnreachable = errors.New("broker unreachable")

// IsUnreachable is the default Config.UnreachableFunc. It reports whether
// err says the broker could not be reached, rather than that it refused the
// messages: ErrBrokerUnreachable, an error with an Unreachable() bool
// method that returns true, a network error (net.Error, timeouts included,
// and context.DeadlineExceeded, which NATS returns while it reconnects), a
// refused, reset, aborted or broken connection, or an unexpected EOF.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var u interface{ Unreachable() bool }
	if errors.As(err, &u) {
		return u.Unreachable()
	}
	var ne net.Error
	return errors.Is(err, ErrBrokerUnreachable) ||
		errors.As(err, &ne) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}

// DefaultOutageBackoff waits about a second before the first probe of a
// broker found unreachable and doubles the wait after each probe that
// fails, up to 30 seconds, with jitter: a broker that comes back is used
// again within 30 seconds.
func DefaultOutageBackoff(probe int) time.Duration {
	return backoff.Exponential(probe, time.Second, 30*time.Second)
}

// outage is the relay's view of its broker: reachable, or down since a
// round in which every publish failed as unreachable. While down, workers
// wait, and one at a time probes the broker with a real round after each
// backoff (Config.OutageBackoffFunc). It is logged once per change: down,
// still down every remindEvery (a minute), reachable again.
//
// A round reports on the broker as it was when the round began: a round
// that began before the broker went down, or before it came back, and
// ends after, is stale (its epoch is not the current one) and changes
// nothing. Otherwise a call confirmed just before a crash, returning
// after another round found the broker gone, would end the outage it
// predates, and a late failure would start one again or let a second
// worker probe.
type outage struct {
	backoffFunc func(probe int) time.Duration
	logger      *slog.Logger
	remindEvery time.Duration
	tel         *telemetry.Relay

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when the broker comes back or a probe ends
	down    bool
	err     error     // the last unreachable error while down
	probes  int       // rounds failed since the outage began
	logged  time.Time // when the outage was last logged
	next    time.Time // when the next probe may start
	probing bool      // a worker is probing
	since   time.Time // when the outage began
	epoch   int       // counts the changes between down and reachable
}

func newOutage(backoffFunc func(int) time.Duration, logger *slog.Logger, tel *telemetry.Relay) *outage {
	return &outage{backoffFunc: backoffFunc, logger: logger, remindEvery: time.Minute, tel: tel, changed: make(chan struct{})}
}

// await returns true when the caller may claim a round, and the epoch to
// report the round's result with: the broker is reachable, or it is down
// and the caller is the one to probe it now (it must then call failed,
// reached or idle). It returns false if stop closes first.
func (o *outage) await(stop <-chan struct{}) (epoch int, ok bool) {
	for {
		o.mu.Lock()
		epoch := o.epoch
		if !o.down {
			o.mu.Unlock()
			return epoch, true
		}
		wait, probing := time.Until(o.next), o.probing
		if !probing && wait <= 0 {
			o.probing = true
			o.mu.Unlock()
			return epoch, true
		}
		changed := o.changed
		o.mu.Unlock()
		// While another worker probes, its result (changed) is what to
		// wait for; otherwise the time of the next probe too.
		var due <-chan time.Time
		if !probing {
			due = time.After(wait)
		}
		select {
		case <-stop:
			return 0, false
		case <-changed:
		case <-due:
		}
	}
}

// failed records a round of epoch in which every publish found the broker
// unreachable: an outage begins, or goes on with a longer wait.
func (o *outage) failed(epoch int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if epoch != o.epoch {
		return
	}
	now := time.Now()
	o.probes++
	o.err = err
	o.next = now.Add(max(o.backoffFunc(o.probes), 0))
	o.probing = false
	o.signal()
	if !o.down {
		o.down, o.since, o.logged = true, now, now
		o.epoch++
		o.tel.Unreachable(true)
		o.logger.Error("relay: the broker is unreachable; publishing is paused and no row is charged an attempt while it lasts: rows are published once it answers again",
			slog.Duration("probe_in", o.next.Sub(now).Round(time.Millisecond)), slog.String("error", err.Error()))
		return
	}
	if now.Sub(o.logged) >= o.remindEvery {
		o.logged = now
		o.logger.Error("relay: the broker is still unreachable; publishing is still paused",
			slog.Duration("down_for", now.Sub(o.since).Round(time.Second)), slog.Int("probes", o.probes), slog.String("error", err.Error()))
	}
}

// reached records a round of epoch in which the broker answered (it took
// a publish, or refused one for a reason of the message's own): an outage
// is over.
func (o *outage) reached(epoch int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down || epoch != o.epoch {
		return
	}
	o.tel.Unreachable(false)
	o.logger.Info("relay: the broker is reachable again; publishing resumed",
		slog.Duration("down_for", time.Since(o.since).Round(time.Millisecond)), slog.Int("probes", o.probes))
	o.down, o.err, o.probes, o.probing = false, nil, 0, false
	o.epoch++
	o.signal()
}

// idle ends a round of epoch that published nothing: if it was the
// probe, the next round probes.
func (o *outage) idle(epoch int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.probing && epoch == o.epoch {
		o.probing = false
		o.signal()
	}
}

// signal wakes the waiting workers; o.mu is held.
func (o *outage) signal() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// Err says why publishing is paused, or returns nil when it is not.
func (o *outage) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down {
		return nil
	}
	return fmt.Errorf("publishing paused for %s: the broker is unreachable (%d rounds failed): %w",
		time.Since(o.since).Round(time.Second), o.probes, o.err)
}
