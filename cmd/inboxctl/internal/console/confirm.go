package console

import (
	"net/http"

	"github.com/pgbox/pgbox/admin"
)

// confirmDryRun is how many of the selected messages the confirmation
// shows.
const confirmDryRun = 20

// field is a hidden form field the confirmation carries over.
type field struct{ Name, Value string }

// confirmView is the first step of every action: what it would change,
// counted and shown, and nothing changed. Its form, posted again with
// confirmed=yes, acts.
type confirmView struct {
	// Action is the URL the form posts to.
	Action string
	// Back is where "Cancel" goes.
	Back string
	// Count is the dry-run count: how many rows the action would change now.
	Count int64
	// Hidden carries the selection over to the second step.
	Hidden []field
	// Messages are the newest of the selected inbox messages.
	Messages []admin.Message
	// NoLeader says no maintainer leads, so a replay scheduled for later
	// or throttled (Schedule) would wait until one starts.
	NoLeader bool
	// Noun names what Count counts: "message", "outbox row".
	Noun string
	// Note is the label of the note field, "" for none.
	Note string
	// NoteRequired makes the note required (a discard's reason).
	NoteRequired bool
	// Outbox are the selected outbox rows.
	Outbox []admin.OutboxMessage
	// Schedule offers running the replay later or throttled.
	Schedule bool
	// Verb names the action: "replay".
	Verb string
	// What says what is selected, in words.
	What string
}

// confirmed reports whether r is the second step of an action: the
// operator saw the dry run and confirmed it.
func confirmed(r *http.Request) bool { return r.PostFormValue("confirmed") == "yes" }

// hiddenSelection returns the fields that carry s, and scope, over to the
// confirmation's second step.
func hiddenSelection(s selection, scope string) []field {
	fs := append([]field{{"scope", scope}}, s.Fields()...)
	for _, id := range s.IDs {
		fs = append(fs, field{"id", id})
	}
	return fs
}
