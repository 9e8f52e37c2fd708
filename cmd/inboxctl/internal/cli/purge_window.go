package cli

import (
	"fmt"
	"time"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/maintenance"
)

// purgeWarnBelow is the --older-than below which purge warns: the
// retention package maintenance keeps done messages for by default, which
// pgbox's design sets longer than any producer's or broker's redelivery
// window. Purging inside it is sometimes right (a test database, a
// consumer whose producers never redeliver), so it is a warning, not a
// refusal; the usual confirmation (or --yes) still applies.
const purgeWarnBelow = maintenance.InboxRetentionDefault

// purgeWindowRule states the rule in purge's help.
var purgeWindowRule = fmt.Sprintf(`An --older-than shorter than %s (the retention package maintenance keeps by
default) gets a warning on stderr: deleting a message ends duplicate
detection for it. It still needs --yes or confirmation, as every purge does.`, inDays(purgeWarnBelow))

// inDays writes a whole number of days as a flag takes it: "7d".
func inDays(d time.Duration) string { return fmt.Sprintf("%dd", d/(24*time.Hour)) }

// purgeSelection is purge's selection in its JSON report.
type purgeSelection struct {
	// Consumer is the consumer purged, or "" for every consumer.
	Consumer string `json:"consumer,omitzero"`
	// OlderThan is --older-than, in seconds.
	OlderThan float64 `json:"older_than"`
	// Status is the status purged: done or discarded.
	Status pgbox.InboxStatus `json:"status"`
}

// warnPurgeWindow warns on stderr when a purge's window (d, given as flag)
// is shorter than purgeWarnBelow: the messages it deletes are the inbox's
// memory that they were handled, so a redelivery of one is handled again.
func (a *app) warnPurgeWindow(d time.Duration, flag string, status pgbox.InboxStatus) {
	if d >= purgeWarnBelow {
		return
	}
	what := "was handled"
	if status == pgbox.InboxDiscarded {
		what = "was set aside"
	}
	fmt.Fprintf(a.errOut, "inboxctl: warning: --older-than %s is shorter than %s, the retention pgbox keeps by default. "+
		"Purging ends duplicate detection for these messages: the inbox forgets that each %s, so a redelivery of one "+
		"(a producer's retry, a broker's redelivery) is stored and handled again. Keep --older-than longer than any "+
		"producer's or broker's redelivery window.\n", flag, inDays(purgeWarnBelow), what)
}
