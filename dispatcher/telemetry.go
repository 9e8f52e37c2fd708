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

// StallErr says why the dispatcher is stalled, or returns nil: messages
// have been claimable for Config.StallTimeout and none was finished
// meanwhile. It names what the dispatcher waits on. The health check fails
// on it.
func (d *Dispatcher) StallErr() error { return d.loop.StallErr() }

// PauseErr says what of the consumer operators have paused (inboxctl
// pause, the console, admin.Pause), by whom, since when and why, or
// returns nil: the dispatcher claims none of those messages until they are
// resumed. It is the dispatcher's view, read from the database at most a
// PollInterval ago. The health check reports it as a warning: a pause is
// an operator's choice, not a fault.
func (d *Dispatcher) PauseErr() error { return d.pauses.Err() }

// UnavailableErr says which event types this dispatcher is not claiming
// because their handler returned Unavailable, for how long and with what
// error, or returns nil: their messages wait, charged no attempt, and one
// is tried as a probe after each backoff (Config.UnavailableBackoffFunc).
// The health check reports it as a warning.
func (d *Dispatcher) UnavailableErr() error { return d.outages.Err() }

// observe counts recorded outcomes: processed, failed attempts, dead.
// Releases, snoozes and Unavailable (a refunded attempt) are not failures.
func (d *Dispatcher) observe(ctx context.Context, outcomes []outcome) {
	finished := 0
	for _, o := range outcomes {
		d.tel.Outcome(ctx, o.eventType, o.status, o.err != "" && !o.refund)
		// A message handed back (Stop, a lost claim, an event type in an
		// outage) is not finished; a snoozed one is: its handler decided,
		// and the snooze's delay says so; so is one whose handler said its
		// dependency is unavailable: the dispatcher is at work, and backs off.
		if !o.refund || o.delay > 0 || o.unavailable {
			finished++
		}
	}
	d.loop.Progress(finished)
}
