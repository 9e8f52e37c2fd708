package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// bulkAction is replay or discard, as the pages offer them.
type bulkAction struct {
	verb, past string
	// statuses are the statuses the action changes: a message in any other
	// is left alone, whatever the selection says.
	statuses []pgbox.InboxStatus
	// narrow limits a filter to the messages the action changes, so that
	// the dry-run count is what it would change.
	narrow func(admin.Filter) admin.Filter
	// note labels the note field; noteRequired makes it required.
	note         string
	noteRequired bool
	// schedule offers running it later or throttled (replay).
	schedule bool
	// run makes the change, reporting progress.
	run func(ctx context.Context, t *Target, a admin.Actor, f admin.Filter, note string, progress func(int64)) (int64, error)
}

// replayAction replays what admin.Replay replays: the dead and retrying
// messages (pending after a failure) of the selection, and its discarded
// ones when it names them (admin.Filter.ReplaySelection).
var replayAction = bulkAction{
	verb: "replay", past: "replayed", note: "Note, kept in each message's history (optional)", schedule: true,
	statuses: []pgbox.InboxStatus{pgbox.InboxDead, pgbox.InboxDiscarded, pgbox.InboxPending},
	narrow:   admin.Filter.ReplaySelection,
	run: func(ctx context.Context, t *Target, a admin.Actor, f admin.Filter, note string, progress func(int64)) (int64, error) {
		return t.Admin.Replay(ctx, admin.ReplayOptions{Actor: a, Filter: f, Note: note, ProgressFunc: progress})
	},
}

// discardAction discards what admin.Discard discards: the dead messages of
// the selection.
var discardAction = bulkAction{
	verb: "discard", past: "discarded", note: "Reason, kept in each message's history (required)", noteRequired: true,
	statuses: []pgbox.InboxStatus{pgbox.InboxDead},
	narrow: func(f admin.Filter) admin.Filter {
		f.Statuses = []pgbox.InboxStatus{pgbox.InboxDead}
		return f
	},
	run: func(ctx context.Context, t *Target, a admin.Actor, f admin.Filter, reason string, progress func(int64)) (int64, error) {
		return t.Admin.Discard(ctx, admin.DiscardOptions{Actor: a, Filter: f, ProgressFunc: progress, Reason: reason})
	},
}

// appliesTo reports whether the action can change any message f selects:
// false when f keeps only statuses the action leaves alone (a discard of
// retrying messages, a replay of done ones), which narrow cannot express.
func (ba bulkAction) appliesTo(f admin.Filter) bool {
	if len(f.Statuses) == 0 {
		return true
	}
	for _, st := range f.Statuses {
		if slices.Contains(ba.statuses, st) {
			return true
		}
	}
	return false
}

// replay replays a selection of messages: now, in the background, or
// later or throttled, by the maintenance job.
func (c *Console) replay(w http.ResponseWriter, r *http.Request, t *Target) error {
	return c.bulk(w, r, t, replayAction)
}

// discard sets a selection of dead messages aside, with a reason.
func (c *Console) discard(w http.ResponseWriter, r *http.Request, t *Target) error {
	return c.bulk(w, r, t, discardAction)
}

// bulk runs the two steps of a replay or discard: the dry run, then, once
// confirmed, the change.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request, t *Target, ba bulkAction) error {
	sel := selectionFrom(r)
	scope := r.PostFormValue("scope")
	switch {
	case scope == "all":
		sel = sel.withoutIDs()
	case len(sel.IDs) == 0:
		return httpError(http.StatusBadRequest, "Nothing selected: tick messages in the list, or use the button for every matching message.")
	}
	f, err := sel.filter()
	if err != nil {
		return err
	}
	if !ba.appliesTo(f) {
		return httpError(http.StatusBadRequest, "Only %s messages can be %s, and this selection (%s) holds none. Pick another status. Nothing was changed.",
			statusList(ba.statuses), ba.past, describe(f))
	}
	f = ba.narrow(f)
	ctx := r.Context()
	n, err := t.Admin.Count(ctx, f)
	if err != nil {
		return err
	}
	back := sel.Link(t.Name, "/messages")
	if !confirmed(r) {
		sample, err := t.Admin.ListPage(ctx, admin.ListPageOptions{Filter: f, Limit: confirmDryRun})
		if err != nil {
			return err
		}
		return c.render(w, r, t, http.StatusOK, "confirm", view{Title: "Confirm: " + ba.verb, Nav: "messages", Data: confirmView{
			Action: "/" + ba.verb, Back: back, Count: n, Hidden: hiddenSelection(sel, scope), Messages: sample,
			NoLeader: ba.schedule && n > 0 && noLeader(ctx, t), Noun: "message", Note: ba.note, NoteRequired: ba.noteRequired,
			Schedule: ba.schedule, Verb: ba.verb, What: describe(f),
		}})
	}
	note := r.PostFormValue("note")
	if ba.noteRequired && note == "" {
		return httpError(http.StatusBadRequest, "A reason is required to %s: say why, for whoever looks at these messages next. Nothing was changed.", ba.verb)
	}
	if ba.schedule {
		opts, later, err := scheduleFrom(r)
		if err != nil {
			return err
		}
		if later {
			opts.Actor, opts.Filter, opts.Note = actor(r), f, note
			return c.scheduleReplay(w, r, t, opts)
		}
	}
	if n == 0 {
		return httpError(http.StatusConflict, "Nothing to %s: no message of %s can be %s now (another operator, or the dispatcher, got there first). Nothing was changed.",
			ba.verb, describe(f), ba.past)
	}
	a := actor(r)
	return c.startJob(w, r, t, a, &job{Matched: n, Next: back, Noun: "message", Past: ba.past, Selection: describe(f), Verb: ba.verb,
		key: fmt.Sprintf("%s %+v", ba.verb, f)},
		func(ctx context.Context, progress func(int64)) (int64, error) {
			return ba.run(ctx, t, a, f, note, progress)
		})
}

// statusList names statuses as a sentence does: "dead", "dead, discarded or
// pending".
func statusList(statuses []pgbox.InboxStatus) string {
	names := make([]string, len(statuses))
	for i, st := range statuses {
		names[i] = string(st)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
