package relay

import "time"

// SetOutageRemindEvery sets how often r logs that the broker is still
// unreachable (a minute otherwise), so that a test need not wait minutes.
// Call it before Start.
func SetOutageRemindEvery(r *Relay, d time.Duration) { r.outage.remindEvery = d }
