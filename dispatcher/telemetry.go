package dispatcher

import "context"

// Running reports whether the dispatcher has started and not begun to
// stop: its workers are claiming messages. A health check reads it.
func (d *Dispatcher) Running() bool { return d.loop.Running() }

// NotifyErr says why notifications of new messages do not reach the
// dispatcher, so that messages wait up to PollInterval to start, or returns
// nil: when they do, before the listener's first self-check, and with
// PollOnly. The health check reports it.
func (d *Dispatcher) NotifyErr() error { return d.loop.NotifyErr() }

// RecordErr says why the dispatcher has stopped claiming messages, or
// returns nil: handlers ran but their outcomes cannot be recorded, and the
// dispatcher retries recording them before it claims anything more. The
// health check reports it.
func (d *Dispatcher) RecordErr() error { return d.loop.RecordErr() }

// Consumer returns the consumer whose messages the dispatcher handles.
func (d *Dispatcher) Consumer() string { return d.consumer }

// observe counts recorded outcomes: processed, failed attempts, dead.
// Releases and snoozes (a refunded attempt) are not failures.
// StallErr says why the dispatcher is stalled, or returns nil: messages
// have been claimable for Config.StallTimeout and none was finished
// meanwhile. It names what the dispatcher waits on. The health check fails
// on it.
func (d *Dispatcher) StallErr() error { return d.loop.StallErr() }

func (d *Dispatcher) observe(ctx context.Context, outcomes []outcome) {
	finished := 0
	for _, o := range outcomes {
		d.tel.Outcome(ctx, o.eventType, o.status, o.err != "" && !o.refund)
		// A message handed back (Stop, a lost claim) is not finished; a
		// snoozed one is: its handler decided, and the snooze's delay says so.
		if !o.refund || o.delay > 0 {
			finished++
		}
	}
	d.loop.Progress(finished)
}
