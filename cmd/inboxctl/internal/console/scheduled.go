package console

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/pgbox/pgbox/admin"
)

// scheduledView is what the scheduled replays page shows.
type scheduledView struct {
	// Highlight is the replay just scheduled, if any.
	Highlight int64
	// Jobs are this console's background actions under way.
	Jobs     []*job
	Replays  []admin.ScheduledReplay
	Unfinish bool
}

// scheduled lists scheduled and throttled replays, those waiting or under
// way first, with their progress from their records (the maintenance job
// counts each batch in them), and this console's background actions under
// way. It refreshes itself while any is unfinished.
func (c *Console) scheduled(w http.ResponseWriter, r *http.Request, t *Target) error {
	list, err := t.Admin.ScheduledReplays(r.Context(), 0)
	if err != nil {
		return err
	}
	v := scheduledView{Jobs: c.jobs.running(t.Name), Replays: list}
	v.Highlight, _ = strconv.ParseInt(r.FormValue("highlight"), 10, 64)
	for _, sr := range list {
		v.Unfinish = v.Unfinish || sr.State == admin.ReplayScheduled || sr.State == admin.ReplayRunning
	}
	page := view{Title: "Scheduled replays", Data: v}
	if v.Unfinish || len(v.Jobs) > 0 {
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
		list, err := t.Admin.ScheduledReplays(r.Context(), 0)
		if err != nil {
			return err
		}
		for _, sr := range list {
			if sr.ID == id {
				return c.render(w, r, t, http.StatusOK, "confirm", view{Title: "Confirm: cancel", Nav: "scheduled", Data: confirmView{
					Action: "/scheduled/cancel", Back: back, Count: 1, Hidden: []field{{"id", strconv.FormatInt(id, 10)}},
					Noun: "scheduled replay", Note: "Why, for the audit log (optional)", Verb: "cancel",
					What: "scheduled replay " + strconv.FormatInt(id, 10) + " (" + string(sr.State) + ", " + count(sr.Replayed) + " of " +
						count(sr.Selected) + " replayed so far, which stay replayed) of " + describe(sr.Filter),
				}})
			}
		}
		return httpError(http.StatusNotFound, "There is no scheduled replay %d in schema %s.", id, t.Admin.Schema())
	}
	a := actor(r)
	err = t.Admin.CancelScheduledReplay(r.Context(), admin.CancelScheduledReplayOptions{Actor: a, ID: id, Note: r.PostFormValue("note")})
	switch {
	case errors.Is(err, admin.ErrNotFound):
		return httpError(http.StatusNotFound, "There is no scheduled replay %d in schema %s. Nothing was changed.", id, t.Admin.Schema())
	case err != nil:
		return err // already ended, or the database: the text says which
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: scheduled replay cancelled", "target", t.Name, "user", a.Name, "remote", a.Host,
		"scheduled_replay", id)
	return seeOther(w, r, back)
}
