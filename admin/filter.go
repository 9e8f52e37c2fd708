package admin

import (
	"fmt"
	"regexp"
	"time"

	"github.com/pgbox/pgbox"
)

// Filter selects inbox messages. Zero fields select everything. It encodes
// as JSON (a scheduled replay stores its filter), leaving out zero fields.
type Filter struct {
	// Consumer keeps one consumer's messages.
	Consumer string `json:"consumer,omitzero"`
	// ErrorContains keeps messages whose last error contains this text,
	// ignoring case.
	ErrorContains string `json:"error_contains,omitzero"`
	// ErrorMatches keeps messages whose last error matches this
	// (PostgreSQL, case-insensitive) regular expression.
	ErrorMatches string `json:"error_matches,omitzero"`
	// EventType keeps one event type.
	EventType string `json:"event_type,omitzero"`
	// Fingerprint keeps one failure group (see Failures): its consumer's
	// messages that are dead, discarded, or pending after a failure, with
	// an error of the group's pattern (Replay leaves the discarded ones
	// unless named, see ReplaySelection). Done messages are never in a
	// group, even those that failed before they succeeded.
	Fingerprint string `json:"fingerprint,omitzero"`
	// IDs keeps these message ids.
	IDs []string `json:"ids,omitzero"`
	// OrderingKey keeps the messages of one ordering key.
	OrderingKey string `json:"ordering_key,omitzero"`
	// ReplayableOnly keeps the messages Replay may touch: dead, discarded,
	// or pending after a failure (Replay itself reads its filter through
	// ReplaySelection, which leaves discarded ones out unless named).
	ReplayableOnly bool `json:"replayable_only,omitzero"`
	// Since keeps messages received at or after it.
	Since time.Time `json:"since,omitzero"`
	// Statuses keeps messages in these statuses.
	Statuses []pgbox.InboxStatus `json:"statuses,omitzero"`
	// Until keeps messages received before it.
	Until time.Time `json:"until,omitzero"`
}

// fingerprintForm is what a failure group's fingerprint looks like.
var fingerprintForm = regexp.MustCompile(`^[0-9a-f]{12}$`)

// ValidateFingerprint reports a fingerprint that no failure group can have:
// anything but 12 lower-case hex digits, the form FailureGroup.Fingerprint
// (and inboxctl failures) gives.
func ValidateFingerprint(fingerprint string) error {
	if !fingerprintForm.MatchString(fingerprint) {
		return fmt.Errorf("failure group %q is not a fingerprint: expected 12 lower-case hex digits, such as 3f2a9c1d0b7e, as 'inboxctl failures' prints them", fingerprint)
	}
	return nil
}

// Validate reports a filter that cannot match anything sensible: an
// unknown status, a malformed fingerprint, or an Until not after Since.
func (f Filter) Validate() error {
	if f.Fingerprint != "" {
		if err := ValidateFingerprint(f.Fingerprint); err != nil {
			return err
		}
	}
	for _, s := range f.Statuses {
		if _, err := pgbox.ParseInboxStatus(string(s)); err != nil {
			return err
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return fmt.Errorf("until (%s) is not after since (%s)", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	return nil
}

// args returns the filter as filterSQL's parameters $1 to $11.
func (f Filter) args() []any {
	var statuses, ids any
	if len(f.Statuses) > 0 {
		statuses = textArray(f.Statuses)
	}
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	var since, until any
	if !f.Since.IsZero() {
		since = f.Since
	}
	if !f.Until.IsZero() {
		until = f.Until
	}
	return []any{nullable(f.Consumer), statuses, nullable(f.EventType), since, until,
		nullable(f.ErrorContains), nullable(f.ErrorMatches), nullable(f.Fingerprint), ids, f.ReplayableOnly, nullable(f.OrderingKey)}
}

// ReplaySelection returns f as Replay and ScheduleReplay read it: only
// what a replay may touch (ReplayableOnly), and, when f names neither
// statuses nor ids, only dead and pending (after a failure) messages. A
// discard is an operator's decision: a bulk replay of a group, a consumer
// or everything leaves discarded messages alone, unless the filter names
// them (InboxDiscarded in Statuses, or their IDs). Count it to count what
// a replay of f would replay.
func (f Filter) ReplaySelection() Filter {
	f.ReplayableOnly = true
	if len(f.Statuses) == 0 && len(f.IDs) == 0 {
		f.Statuses = []pgbox.InboxStatus{pgbox.InboxDead, pgbox.InboxPending}
	}
	return f
}

// textArray returns statuses as the plain strings a text[] parameter takes.
func textArray[S ~string](statuses []S) []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}
