package relay

import (
	"time"

	"github.com/pgbox/pgbox/internal/frontier"
)

// SetOutageRemindEvery sets how often r logs that the broker is still
// unreachable, or a topic still hangs (a minute otherwise), so that a test
// need not wait minutes. Call it before Start.
func SetOutageRemindEvery(r *Relay, d time.Duration) {
	r.outage.remindEvery = d
	r.calls.remindEvery = d
}

// SetFrontier sets how far behind the oldest row claimed r's claims start,
// and how often at least one reads from the start (see package frontier).
// Set it before Start.
func SetFrontier(r *Relay, margin, fullEvery time.Duration) {
	r.frontier = frontier.New(margin, fullEvery)
}

// NextClaimFrom returns where r's next claim would start in the pending
// index (see package frontier): nil for its start. It spends a rewind.
func NextClaimFrom(r *Relay) *time.Time { return r.frontier.Next(time.Now()) }
