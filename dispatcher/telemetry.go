package dispatcher

import "context"

// Running reports whether the dispatcher has started and not begun to
// stop: its workers are claiming messages. A health check reads it.
func (d *Dispatcher) Running() bool { return d.loop.Running() }

// Consumer returns the consumer whose messages the dispatcher handles.
func (d *Dispatcher) Consumer() string { return d.consumer }

// observe counts recorded outcomes: processed, failed attempts, dead.
// Releases and snoozes (a refunded attempt) are not failures.
func (d *Dispatcher) observe(ctx context.Context, outcomes []outcome) {
	for _, o := range outcomes {
		d.tel.Outcome(ctx, o.eventType, o.status, o.err != "" && !o.refund)
	}
}
