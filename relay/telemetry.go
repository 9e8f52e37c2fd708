package relay

// Running reports whether the relay has started and not begun to stop:
// its workers are claiming rows. A health check reads it.
func (r *Relay) Running() bool { return r.loop.Running() }
