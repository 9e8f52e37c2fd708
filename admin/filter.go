package admin

import (
	"fmt"
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
	// Fingerprint keeps one failure group (see Failures).
	Fingerprint string `json:"fingerprint,omitzero"`
	// IDs keeps these message ids.
	IDs []string `json:"ids,omitzero"`
	// ReplayableOnly keeps the messages Replay may touch: dead, discarded,
	// or pending after a failure.
	ReplayableOnly bool `json:"replayable_only,omitzero"`
	// Since keeps messages received at or after it.
	Since time.Time `json:"since,omitzero"`
	// Statuses keeps messages in these statuses.
	Statuses []pgbox.InboxStatus `json:"statuses,omitzero"`
	// Until keeps messages received before it.
	Until time.Time `json:"until,omitzero"`
}

// Validate reports a filter that cannot match anything sensible: an
// unknown status, or an Until not after Since.
func (f Filter) Validate() error {
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

// args returns the filter as filterSQL's parameters $1 to $10.
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
		nullable(f.ErrorContains), nullable(f.ErrorMatches), nullable(f.Fingerprint), ids, f.ReplayableOnly}
}

// textArray returns statuses as the plain strings a text[] parameter takes.
func textArray[S ~string](statuses []S) []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}
