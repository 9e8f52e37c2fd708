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

// ErrPublisherClosed is the error pgbox's publishers return once closed.
// It wraps ErrBrokerUnreachable: a relay left running on a closed
// publisher holds its rows, uncharged, and reports an outage, rather than
// spending their attempts.
var ErrPublisherClosed = fmt.Errorf("the publisher is closed (stop the relay before closing its publisher): %w", ErrBrokerUnreachable)

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

// outage is the relay's view of its broker: reachable; in doubt, after a
// round that reached it and then had a call fail unreachable or hang; or
// down, since a round in which no call reached it. While in doubt or down,
// workers wait, and one at a time probes the broker with a real round:
// at once when in doubt, and after each backoff (Config.OutageBackoffFunc)
// when down. The probe decides: a probe that reaches the broker ends an
// outage and charges the rows of the round in doubt, whose failure was
// then their own (a message the broker's connection cannot take); a probe
// that reaches nothing declares the outage, and those rows stay uncharged,
// as every row is while it lasts. An outage is logged once per change:
// down, still down every remindEvery (a minute), reachable again.
//
// A round reports on the broker as it was when the round began: a round
// that began before the state last changed is stale (its epoch is not the
// current one) and changes nothing. Otherwise a call confirmed just before
// a crash, returning after another round found the broker gone, would end
// the outage it predates, and a late failure would start one again or let
// a second worker probe.
type outage struct {
	backoffFunc func(probe int) time.Duration
	logger      *slog.Logger
	remindEvery time.Duration
	tel         *telemetry.Relay

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when the state changes or a probe ends
	state   brokerState
	doubts  []doubt   // while in doubt: the rows the probe's verdict charges or forgives
	err     error     // the last unreachable error while down
	probes  int       // rounds failed since the outage began
	logged  time.Time // when the outage was last logged
	next    time.Time // when the next probe may start
	probing bool      // a worker is probing
	since   time.Time // when the outage began
	epoch   int       // counts the changes of state
}

// brokerState is what the relay knows of its broker.
type brokerState int

const (
	reachable brokerState = iota
	inDoubt               // a round reached it, then a call failed unreachable or hung
	down                  // a round reached nothing: every call failed unreachable or hung
)

// doubt is a row handed back uncharged from a round in doubt, with the
// error its call failed with: charged with it if the probe finds the
// broker reachable.
type doubt struct {
	err error
	row *row
}

func newOutage(backoffFunc func(int) time.Duration, logger *slog.Logger, tel *telemetry.Relay) *outage {
	return &outage{backoffFunc: backoffFunc, logger: logger, remindEvery: time.Minute, tel: tel, changed: make(chan struct{})}
}

// await returns true when the caller may claim a round, and the epoch to
// report the round's result with: the broker is reachable, or the caller
// is the one to probe it now (it must then report the round). It returns
// false if stop closes first.
func (o *outage) await(stop <-chan struct{}) (epoch int, ok bool) {
	for {
		o.mu.Lock()
		epoch := o.epoch
		if o.state == reachable {
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

// failed records a round of epoch that reached nothing, every call having
// failed unreachable or hung: an outage begins, or goes on with a longer
// wait. The rows in doubt, if any, are forgiven: the broker did go away.
func (o *outage) failed(epoch int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failedLocked(epoch, err)
}

func (o *outage) failedLocked(epoch int, err error) {
	if epoch != o.epoch {
		return
	}
	now := time.Now()
	o.probes++
	o.err = err
	o.next = now.Add(max(o.backoffFunc(o.probes), 0))
	o.probing = false
	o.signal()
	if o.state != down {
		o.state, o.doubts, o.since, o.logged = down, nil, now, now
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

// hanging records a round of epoch whose only news is that its topics
// still hang: no call was made, since an earlier call to each is still
// out. For a probe that is a failure, err its cause; otherwise it tells
// nothing of the broker (a topic that hangs alone is reported by calls).
func (o *outage) hanging(epoch int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state != reachable {
		o.failedLocked(epoch, err)
		return
	}
	o.idleLocked(epoch)
}

// reached records a round of epoch in which the broker answered every
// call (it took them, or refused one for a reason of the message's own):
// an outage or a doubt is over. It returns the rows in doubt, to charge.
func (o *outage) reached(epoch int) []doubt {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state == reachable || epoch != o.epoch {
		return nil
	}
	charge := o.doubts
	o.end()
	return charge
}

// mixed records a round of epoch that reached the broker, then had the
// calls of doubts fail unreachable (err) or hang: in doubt until a probe
// decides, which the next round is, at once. It returns the rows of an
// earlier doubt, to charge: this round reached the broker.
//
// A probe of a broker that was down, which reached it with some calls
// and not with others, found it coming back: a restarted server answers
// some connections before others, or refuses writes while it loads its
// data (Redis's LOADING). The outage ends, and the failed calls' rows
// were its victims: handed back uncharged, as every row of the outage,
// and not in doubt. (Kept in doubt, the next round, reaching the broker,
// charged them: TestRedis/Outage failed so in make test.) A row that
// breaks the connection fails again in a later round, with the broker
// reachable, and is charged after that round's probe.
func (o *outage) mixed(epoch int, err error, doubts []doubt) []doubt {
	o.mu.Lock()
	defer o.mu.Unlock()
	if epoch != o.epoch {
		return nil
	}
	charge := o.doubts
	switch o.state {
	case down:
		o.end() // no doubt was kept while down: nothing to charge
		return nil
	case reachable:
		o.logger.Warn("relay: a publish failed after others of its round went out; its rows are handed back uncharged, and the next round probes the broker: "+
			"if it reaches nothing, this is an outage and they stay uncharged; if it answers, the failure was theirs and they are charged",
			slog.Int("rows", len(doubts)), slog.String("error", err.Error()))
	}
	o.state, o.doubts, o.err = inDoubt, doubts, err
	o.next, o.probing = time.Now(), false
	o.epoch++
	o.signal()
	return charge
}

// end ends an outage or a doubt; o.mu is held.
func (o *outage) end() {
	if o.state == down {
		o.tel.Unreachable(false)
		o.logger.Info("relay: the broker is reachable again; publishing resumed",
			slog.Duration("down_for", time.Since(o.since).Round(time.Millisecond)), slog.Int("probes", o.probes))
	}
	o.state, o.doubts, o.err, o.probes, o.probing = reachable, nil, nil, 0, false
	o.epoch++
	o.signal()
}

// idle ends a round of epoch that published nothing: if it was the
// probe, the next round probes.
func (o *outage) idle(epoch int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.idleLocked(epoch)
}

func (o *outage) idleLocked(epoch int) {
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
	if o.state != down {
		return nil
	}
	return fmt.Errorf("publishing paused for %s: the broker is unreachable (%d rounds failed): %w",
		time.Since(o.since).Round(time.Second), o.probes, o.err)
}
