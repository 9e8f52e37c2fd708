package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/cmd/inboxctl/internal/human"
)

// scheduledView is what the scheduled replays page shows.
type scheduledView struct {
	// Active says a replay is waiting or under way: the page refreshes.
	Active bool
	// Highlight is the replay just scheduled, if any.
	Highlight int64
	// Jobs are this console's background actions under way.
	Jobs []*job
	// NoLeader says a replay waits or runs while no maintainer is the
	// maintenance leader: nothing will run it until one starts.
	NoLeader bool
	// Replays are the scheduled replays, those waiting or under way first.
	Replays []admin.ScheduledReplay
}

// scheduled lists scheduled and throttled replays, those waiting or under
// way first, with their progress from their records (the maintenance job
// counts each batch in them), and this console's background actions under
// way. It refreshes itself while any is unfinished, and warns when no
// maintainer is there to run them.
func (c *Console) scheduled(w http.ResponseWriter, r *http.Request, t *Target) error {
	list, err := t.Admin.ScheduledReplays(r.Context(), 0)
	if err != nil {
		return err
	}
	v := scheduledView{Jobs: c.jobs.running(t.Name), Replays: list}
	v.Highlight, _ = strconv.ParseInt(r.FormValue("highlight"), 10, 64)
	for _, sr := range list {
		v.Active = v.Active || active(sr.State)
	}
	if v.Active {
		ps, err := t.Admin.Processes(r.Context())
		if err != nil {
			return err
		}
		v.NoLeader = ps.Leader == nil
	}
	page := view{Title: "Scheduled replays", Data: v}
	if v.Active || len(v.Jobs) > 0 {
		page.Refresh = 5
	}
	return c.render(w, r, t, http.StatusOK, "scheduled", page)
}

// cancelScheduled calls off a scheduled replay, after a confirmation.
func (c *Console) cancelScheduled(w http.ResponseWriter, r *http.Request, t *Target) error {
	id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
	if err != nil {
		return httpError(http.StatusBadRequest, "%q is not a scheduled replay's id. Nothing was changed.", r.PostFormValue("id"))
	}
	back := link(t.Name, "/scheduled")
	if !confirmed(r) {
		sr, err := findScheduledReplay(r.Context(), t, id)
		if err != nil {
			return err
		}
		return c.render(w, r, t, http.StatusOK, "confirm", view{Title: "Confirm: cancel", Nav: "scheduled", Data: confirmView{
			Action: "/scheduled/cancel", Back: back, Count: 1, Hidden: []field{{"id", strconv.FormatInt(id, 10)}},
			Noun: "scheduled replay", Note: "Why, for the audit log (optional)", Verb: "cancel",
			What: fmt.Sprintf("scheduled replay %d (%s, %s of %s replayed so far, which stay replayed) of %s", id, sr.State,
				human.Count(sr.Replayed), human.Count(sr.Selected), describe(sr.Filter)),
		}})
	}
	a := actor(r)
	if err := t.Admin.CancelScheduledReplay(r.Context(), admin.CancelScheduledReplayOptions{Actor: a, ID: id, Note: r.PostFormValue("note")}); err != nil {
		// Ended meanwhile (finished, failed, or cancelled by someone
		// else) is the operator's news, not the console's failure.
		if sr, ferr := findScheduledReplay(r.Context(), t, id); ferr == nil && !active(sr.State) {
			return httpError(http.StatusConflict, "Scheduled replay %d has already ended (%s): there is nothing left to cancel. Nothing was changed.", id, sr.State)
		}
		return err
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: scheduled replay cancelled", "target", t.Name, "user", a.Name, "remote", a.Host,
		"scheduled_replay", id)
	return seeOther(w, r, back)
}

// findScheduledReplay returns target t's scheduled replay id, or a 404
// saying there is none.
func findScheduledReplay(ctx context.Context, t *Target, id int64) (*admin.ScheduledReplay, error) {
	list, err := t.Admin.ScheduledReplays(ctx, 0)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].ID == id {
			return &list[i], nil
		}
	}
	return nil, httpError(http.StatusNotFound, "There is no scheduled replay %d in schema %s. Nothing was changed.", id, t.Admin.Schema())
}

// active reports whether a scheduled replay in state s is waiting or under
// way: one that can still be cancelled.
func active(s admin.ReplayState) bool {
	return s == admin.ReplayScheduled || s == admin.ReplayRunning
}
