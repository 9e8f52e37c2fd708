package relay

import "errors"

// Running reports whether the relay has started and not begun to stop:
// its workers are claiming rows. A health check reads it.
func (r *Relay) Running() bool { return r.loop.Running() }

// NotifyErr says why notifications of new rows do not reach the relay, so
// that rows wait up to PollInterval to be published, or returns nil: when
// they do, before the listener's first self-check, and with PollOnly. The
// health check reports it.
func (r *Relay) NotifyErr() error { return r.loop.NotifyErr() }

// RecordErr says why the relay has stopped claiming rows, or returns nil:
// it published rows but cannot record that it did, and retries recording
// before it claims anything more. The health check reports it.
func (r *Relay) RecordErr() error { return r.loop.RecordErr() }

// BrokerErr says why the relay cannot publish, or returns nil: the broker
// was unreachable in its last round (Config.UnreachableFunc), and it probes
// it again after a backoff, or topics whose Publish calls have hung for
// three PublishTimeouts get no new call until they return. No row is
// charged an attempt meanwhile. The health check reports it as a warning;
// the stall check (StallErr) and the outbox backlog check fail once rows
// have waited too long.
func (r *Relay) BrokerErr() error { return errors.Join(r.outage.Err(), r.calls.Err()) }

// StallErr says why the relay is stalled, or returns nil: rows have been
// publishable for Config.StallTimeout and none was published (or failed
// and charged) meanwhile. It names what the relay waits on. The health
// check fails on it.
func (r *Relay) StallErr() error { return r.loop.StallErr() }
