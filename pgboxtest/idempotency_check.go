package pgboxtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// DeliveriesDefault is the default IdempotencyCheck.Deliveries.
	DeliveriesDefault = 8
	// TimeoutDefault is the default IdempotencyCheck.Timeout.
	TimeoutDefault = time.Minute
)

// ErrNotIdempotent is wrapped by the error IdempotencyCheck.Run returns when
// a message's effect did not happen exactly once.
var ErrNotIdempotent = errors.New("not idempotent")

// Delivery is one delivery an IdempotencyCheck makes.
type Delivery struct {
	// Attempt is the delivery's number within its round, from 1.
	Attempt int
	// Concurrent reports whether the delivery is part of the concurrent
	// round, racing the round's other deliveries.
	Concurrent bool
	// Round is 1 for the sequential round and 2 for the concurrent one.
	// Build the delivered message from it (an id such as "order-1" and
	// "order-2") so that the concurrent round starts from a message never
	// seen before and its first deliveries race each other.
	Round int
}

// IdempotencyCheck proves that a consumer (a message handler, an HTTP
// handler) is idempotent: that a message delivered many times, one after
// another and all at once, across crashes, has its effect exactly once.
// Run it with RequireIdempotent from a test, or with Run.
//
// It makes two rounds, each with a message of its own:
//
//  1. Sequential: Deliveries deliveries, one after another. When Crash is
//     set, the consumer is crashed and restarted (Crash, then Restart)
//     after every delivery but the last, so deliveries also arrive at a
//     consumer that just lost whatever it was doing.
//  2. Concurrent: Deliveries deliveries at the same instant, from as many
//     goroutines. When Crash is set, the consumer is then crashed and
//     restarted once, while it may still be handling them.
//
// After each round it calls Settle, then Effect, and fails unless the
// effect happened exactly once.
type IdempotencyCheck struct {
	// Crash stops the consumer abruptly, as a crash would: kill its
	// process, or stop it with a context that is already cancelled, so that
	// whatever it was doing is cut off. Restart is called right after.
	// Optional; when set, Restart is required.
	Crash func(ctx context.Context) error

	// Deliver delivers the round's message once, as the broker or client
	// would: inbox.Receive, a Watermill publish, an HTTP request with an
	// Idempotency-Key. It returns an error only for a failure the test
	// should stop on; an answer that a duplicate legitimately gets (a
	// duplicate outcome, a 409) is not one. Deliveries of the concurrent
	// round call it from many goroutines at once. Required.
	Deliver func(ctx context.Context, d Delivery) error

	// Deliveries is how many times each round delivers its message.
	// Defaults to DeliveriesDefault (8); at least 2.
	Deliveries int

	// Effect returns how many times the effect of the round's message
	// happened, as the outside world sees it: payment rows written, charges
	// recorded by a fake gateway, emails queued. Required.
	Effect func(ctx context.Context, round int) (int, error)

	// Restart starts the consumer again after Crash. Required with Crash.
	Restart func(ctx context.Context) error

	// Settle waits until the round's deliveries have had whatever effect
	// they will have, before Effect is asked: WaitDrained for a consumer
	// that works in the background (a dispatcher), nothing for one that
	// works before Deliver returns (inbox.Process, an HTTP handler).
	// Optional.
	Settle func(ctx context.Context) error

	// Timeout bounds the whole check under RequireIdempotent. Defaults to
	// TimeoutDefault (one minute).
	Timeout time.Duration
}

// RequireIdempotent runs check and fails the test, at once and with a
// message saying which round had its effect how many times, unless every
// round's effect happened exactly once. It must be called from the test's
// goroutine.
func RequireIdempotent(tb testing.TB, check IdempotencyCheck) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), cmp.Or(check.Timeout, TimeoutDefault))
	defer cancel()
	if err := check.Run(ctx); err != nil {
		tb.Fatal(err)
	}
}

// Run runs the check's two rounds and returns nil if each message's effect
// happened exactly once, an error wrapping ErrNotIdempotent if one did not,
// or the first error of a hook (Deliver, Crash, Restart, Settle, Effect),
// saying which call it was.
func (c IdempotencyCheck) Run(ctx context.Context) error {
	c.Deliveries = cmp.Or(c.Deliveries, DeliveriesDefault)
	if err := c.validate(); err != nil {
		return err
	}

	// Round 1: one after another, crashing in between.
	for attempt := 1; attempt <= c.Deliveries; attempt++ {
		d := Delivery{Attempt: attempt, Round: 1}
		if err := c.Deliver(ctx, d); err != nil {
			return fmt.Errorf("pgboxtest: round 1 (sequential), delivery %d: %w", attempt, err)
		}
		if attempt < c.Deliveries {
			if err := c.crash(ctx, fmt.Sprintf("after round 1's delivery %d", attempt)); err != nil {
				return err
			}
		}
	}
	if err := c.settleAndCount(ctx, 1); err != nil {
		return err
	}

	// Round 2: all at once, then a crash while they may still be handled.
	start := make(chan struct{})
	errs := make([]error, c.Deliveries)
	var wg sync.WaitGroup
	for i := range c.Deliveries {
		wg.Go(func() {
			<-start
			if err := c.Deliver(ctx, Delivery{Attempt: i + 1, Concurrent: true, Round: 2}); err != nil {
				errs[i] = fmt.Errorf("pgboxtest: round 2 (concurrent), delivery %d: %w", i+1, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := c.crash(ctx, "after round 2's deliveries"); err != nil {
		return err
	}
	return c.settleAndCount(ctx, 2)
}

func (c IdempotencyCheck) validate() error {
	var problems []string
	if c.Deliver == nil {
		problems = append(problems, "IdempotencyCheck.Deliver is nil: give the function that delivers the message once")
	}
	if c.Effect == nil {
		problems = append(problems, "IdempotencyCheck.Effect is nil: give the function that counts the message's effect")
	}
	if c.Deliveries < 2 {
		problems = append(problems, fmt.Sprintf("IdempotencyCheck.Deliveries is %d: deliver at least twice (0 for the default, %d)", c.Deliveries, DeliveriesDefault))
	}
	if (c.Crash == nil) != (c.Restart == nil) {
		problems = append(problems, "IdempotencyCheck.Crash and Restart go together: set both or neither")
	}
	if len(problems) > 0 {
		return errors.New("pgboxtest: " + strings.Join(problems, "; "))
	}
	return nil
}

// crash crashes and restarts the consumer, if the check has the hooks.
func (c IdempotencyCheck) crash(ctx context.Context, when string) error {
	if c.Crash == nil {
		return nil
	}
	if err := c.Crash(ctx); err != nil {
		return fmt.Errorf("pgboxtest: crash %s: %w", when, err)
	}
	if err := c.Restart(ctx); err != nil {
		return fmt.Errorf("pgboxtest: restart %s: %w", when, err)
	}
	return nil
}

// settleAndCount waits for the round's effects and checks there is exactly
// one.
func (c IdempotencyCheck) settleAndCount(ctx context.Context, round int) error {
	desc := fmt.Sprintf("round 1 (%d sequential deliveries", c.Deliveries)
	if round == 2 {
		desc = fmt.Sprintf("round 2 (%d concurrent deliveries", c.Deliveries)
	}
	if c.Crash != nil {
		desc += ", with crashes"
	}
	desc += ")"
	if c.Settle != nil {
		if err := c.Settle(ctx); err != nil {
			return fmt.Errorf("pgboxtest: settle %s: %w", desc, err)
		}
	}
	n, err := c.Effect(ctx, round)
	switch {
	case err != nil:
		return fmt.Errorf("pgboxtest: count the effect of %s: %w", desc, err)
	case n == 0:
		return fmt.Errorf("pgboxtest: %w: %s had no effect, want exactly 1: was the message ever handled? (a consumer that works in the background needs Settle, such as WaitDrained)", ErrNotIdempotent, desc)
	case n != 1:
		return fmt.Errorf("pgboxtest: %w: %s had its effect %d times, want exactly 1", ErrNotIdempotent, desc, n)
	}
	return nil
}
