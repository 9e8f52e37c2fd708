package console

import (
	"net/http"
	"strings"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// selection is which inbox messages a page lists or an action acts on, as
// form fields: the filter of the messages page, and the ids ticked in it.
type selection struct {
	// Consumer keeps one consumer's messages (form field consumer).
	Consumer string
	// Error keeps messages whose last error contains it (error).
	Error string
	// Group keeps one failure group, by fingerprint (group).
	Group string
	// IDs are the messages ticked (id, repeated); they need Consumer.
	IDs []string
	// Key keeps one ordering key's messages (key).
	Key string
	// Status is a status, statusFailed (the default) or statusAny (status).
	Status string
	// Type keeps one event type (type).
	Type string
}

// selectionFrom reads a selection from r's query or form.
func selectionFrom(r *http.Request) selection {
	_ = r.ParseForm() // a malformed body leaves the form empty: nothing is selected
	trim := strings.TrimSpace
	s := selection{Consumer: trim(r.Form.Get("consumer")), Error: trim(r.Form.Get("error")), Group: trim(r.Form.Get("group")),
		Key: trim(r.Form.Get("key")), Status: trim(r.Form.Get("status")), Type: trim(r.Form.Get("type"))}
	for _, id := range r.Form["id"] {
		if id != "" {
			s.IDs = append(s.IDs, id)
		}
	}
	return s
}

// The status choices besides the statuses themselves: the failed messages
// (the default) and every status.
const (
	statusFailed = "failed"
	statusAny    = "any"
)

// statusChoices are the messages page's status choices, the default first.
func statusChoices() []string {
	out := []string{statusFailed}
	for _, st := range pgbox.InboxStatuses() {
		out = append(out, string(st))
	}
	return append(out, statusAny)
}

// readsDedupeMemory reports whether listing s reads the done messages one
// by one: done or any status, without a group or ids to narrow it. No
// index orders the done messages by arrival, so such a list sorts every
// done message of the selection.
func (s selection) readsDedupeMemory() bool {
	return (s.Status == string(pgbox.InboxDone) || s.Status == statusAny) && s.Group == "" && len(s.IDs) == 0
}

// filter returns the admin.Filter s stands for, or a 400 error naming what
// is wrong with it. With no status it selects the failed messages (dead,
// discarded, or retrying), read from their small index.
func (s selection) filter() (admin.Filter, error) {
	f := admin.Filter{Consumer: s.Consumer, ErrorContains: s.Error, EventType: s.Type, Fingerprint: s.Group, IDs: s.IDs, OrderingKey: s.Key}
	switch s.Status {
	case "", statusFailed:
		f.ReplayableOnly = true
	case statusAny:
	default:
		f.Statuses = []pgbox.InboxStatus{pgbox.InboxStatus(s.Status)}
	}
	if len(s.IDs) > 0 && s.Consumer == "" {
		return f, httpError(http.StatusBadRequest, "Messages picked by id need their consumer: ids are unique per consumer. Filter the list by consumer first.")
	}
	if err := f.Validate(); err != nil {
		return f, httpError(http.StatusBadRequest, "%s", err)
	}
	return f, nil
}

// withoutIDs is s with no ids ticked: the whole filter.
func (s selection) withoutIDs() selection {
	s.IDs = nil
	return s
}

// pairs returns s as query pairs for link, ids left out.
func (s selection) pairs() []any {
	return []any{"consumer", s.Consumer, "group", s.Group, "key", s.Key, "status", s.Status, "type", s.Type, "error", s.Error}
}

// Link returns the URL of path on target db with s's filter and the
// further pairs kv.
func (s selection) Link(db, path string, kv ...any) string {
	return link(db, path, append(s.pairs(), kv...)...)
}

// Fields returns s's filter as the hidden fields of a form, ids left out.
func (s selection) Fields() []field {
	var fs []field
	p := s.pairs()
	for i := 0; i < len(p); i += 2 {
		if v := p[i+1].(string); v != "" {
			fs = append(fs, field{p[i].(string), v})
		}
	}
	return fs
}
