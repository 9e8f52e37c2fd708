package dispatcher

import (
	"time"

	"github.com/pgbox/pgbox/internal/frontier"
)

// SetAfterClaimHook makes d call fn between each claim's commit and its
// handlers: the window in which a paused worker can lose its claim. Set it
// before Start.
func SetAfterClaimHook(d *Dispatcher, fn func(ids []string)) { d.hooks.afterClaim = fn }

// SetFrontier sets how far behind the oldest message claimed d's claims
// start, and how often at least one reads from the start (see package
// frontier).
// Set it before Start.
func SetFrontier(d *Dispatcher, margin, fullEvery time.Duration) {
	d.frontier = frontier.New(margin, fullEvery)
}

// NextClaimFrom returns where d's next claim would start in the pending
// index (see package frontier): nil for its start. It spends a rewind.
func NextClaimFrom(d *Dispatcher) *time.Time { return d.frontier.Next(time.Now()) }
