package console

import (
	"errors"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// messagesPage is how many messages a page of the list shows.
const messagesPage = 50

// messagesView is what the messages page shows.
type messagesView struct {
	// CanReplay and CanDiscard say which actions the list offers: none
	// that its status filter leaves nothing to act on.
	CanReplay, CanDiscard bool
	// Before is the seq this page starts below; 0 for the newest.
	Before int64
	// Messages is the page.
	Messages []admin.Message
	// Next is the seq the next page starts below; 0 when this is the last.
	Next int64
	// Sel is the filter.
	Sel selection
	// Slow says the list reads every done message of the selection.
	Slow bool
	// Statuses are the status choices.
	Statuses []string
}

// Tickable reports whether each message gets a box to tick: when one
// consumer is shown (ids are unique per consumer) and an action applies.
func (v messagesView) Tickable() bool {
	return v.Sel.Consumer != "" && (v.CanReplay || v.CanDiscard)
}

// messages lists the messages a filter selects (a failure group, a
// consumer's dead ones, …), newest first, a page at a time by arrival
// order, with a box to tick on each when one consumer is shown.
func (c *Console) messages(w http.ResponseWriter, r *http.Request, t *Target) error {
	v := messagesView{Sel: selectionFrom(r).withoutIDs(), Statuses: statusChoices()}
	if v.Sel.Status == "" {
		v.Sel.Status = statusFailed
	}
	v.Slow = v.Sel.readsDedupeMemory()
	f, err := v.Sel.filter()
	if err != nil {
		return err
	}
	v.CanReplay, v.CanDiscard = replayAction.appliesTo(f), discardAction.appliesTo(f)
	if b := r.FormValue("before"); b != "" {
		if v.Before, err = strconv.ParseInt(b, 10, 64); err != nil || v.Before < 0 {
			return httpError(http.StatusBadRequest, "before=%q is not a message's place in the inbox: follow the page links", b)
		}
	}
	v.Messages, err = t.Admin.ListPage(r.Context(), admin.ListPageOptions{Before: v.Before, Filter: f, Limit: messagesPage})
	if err != nil {
		return err
	}
	if len(v.Messages) == messagesPage {
		v.Next = v.Messages[len(v.Messages)-1].Seq
	}
	return c.render(w, r, t, http.StatusOK, "messages", view{Title: "Messages", Data: v})
}

// messageView is what the message page shows.
type messageView struct {
	// Consumers lists the consumers holding the id, when none was given
	// and several hold it (or none: Detail is nil either way).
	Consumers []string
	// Detail is the message in full.
	Detail *admin.Detail
	// ID is the id asked for.
	ID string
	// Replayable and Discardable say which actions apply.
	Replayable, Discardable bool
	// Editable says the payload can be edited and the message replayed
	// (the edit page): replayable, and its payload text.
	Editable bool
}

// message shows one message in full: its payload, metadata, every
// attempt with its error and stack, and its replays and discards.
func (c *Console) message(w http.ResponseWriter, r *http.Request, t *Target) error {
	consumer, id := r.FormValue("consumer"), r.FormValue("id")
	if id == "" {
		return httpError(http.StatusBadRequest, "Which message? Give its id (and consumer): follow a link from a list.")
	}
	v := messageView{ID: id}
	if consumer == "" {
		holders, err := t.Admin.ConsumersOf(r.Context(), id)
		if err != nil {
			return err
		}
		if len(holders) != 1 {
			v.Consumers = holders
			status := http.StatusOK
			if len(holders) == 0 {
				status = http.StatusNotFound
			}
			return c.render(w, r, t, status, "message", view{Title: "Message " + id, Nav: "messages", Data: v})
		}
		consumer = holders[0]
	}
	d, err := t.Admin.Show(r.Context(), consumer, id)
	if errors.Is(err, admin.ErrNotFound) {
		return httpError(http.StatusNotFound, "Consumer %q holds no message %q in schema %s. Ids are matched exactly (case and spaces count): check it, or leave the consumer out to look in every consumer's.",
			consumer, id, t.Admin.Schema())
	}
	if err != nil {
		return err
	}
	v.Detail = d
	v.Discardable = d.Status == pgbox.InboxDead
	v.Replayable = replayable(d)
	v.Editable = v.Replayable && utf8.Valid(d.Payload)
	return c.render(w, r, t, http.StatusOK, "message", view{Title: "Message " + id, Nav: "messages", Data: v})
}
