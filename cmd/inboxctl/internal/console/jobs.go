package console

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/pgbox/pgbox/admin"
)

// jobView is what the job page shows.
type jobView struct {
	// Err is why the job stopped, redacted; "" if it has not failed.
	Err string
	// Finished is when it ended; nil while it runs.
	Finished *time.Time
	// Job is the background action.
	Job *job
}

// job shows one background action's progress, refreshing itself while it
// runs.
func (c *Console) job(w http.ResponseWriter, r *http.Request, t *Target) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	j := c.jobs.get(id)
	if err != nil || j == nil || j.Target != t.Name {
		return httpError(http.StatusNotFound, "This console has no background action %q: it keeps the last %d, and forgets them when it restarts. The audit log keeps every one.",
			r.PathValue("id"), jobsKept)
	}
	err, finished := j.State()
	v := view{Title: "Background " + j.Verb + " " + strconv.FormatInt(j.ID, 10), Nav: "scheduled",
		Data: jobView{Err: c.errorText(err), Finished: finished, Job: j}}
	if finished == nil {
		v.Refresh = 1
	}
	return c.render(w, r, t, http.StatusOK, "job", v)
}

// startJob runs fn in the background as j, on behalf of a, and sends the
// browser to j's page; the action's own handler has parsed the request and
// counted the dry run. The same action on the same selection, still under
// way (the confirmation posted twice), is not started again: the browser
// goes to the one under way. A console that is closing refuses, changing
// nothing.
func (c *Console) startJob(w http.ResponseWriter, r *http.Request, t *Target, a admin.Actor, j *job, fn jobFunc) error {
	j.Target, j.User = t.Name, a.Name
	j, started, err := c.jobs.start(j, fn)
	if err != nil {
		return httpError(http.StatusServiceUnavailable, "Refused: %s. Nothing was changed: run it again once the console is back.", err)
	}
	if !started {
		c.cfg.Logger.InfoContext(r.Context(), "console: "+j.Verb+" already under way", "target", t.Name, "user", a.Name, "job", j.ID)
		return seeOther(w, r, link(t.Name, "/jobs/"+strconv.FormatInt(j.ID, 10)))
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: "+j.Verb+" started", "target", t.Name, "user", a.Name, "remote", a.Host,
		"job", j.ID, "matched", j.Matched)
	return seeOther(w, r, link(t.Name, "/jobs/"+strconv.FormatInt(j.ID, 10)))
}

// logJobEnded logs how a background action ended, for whoever started it
// and closed its page since: finished, stopped with the console, or
// failed, with the error (redacted).
func (c *Console) logJobEnded(j *job) {
	err, _ := j.State()
	attrs := []any{"target", j.Target, "user", j.User, "job", j.ID, "matched", j.Matched, "done", j.Done.Load()}
	switch {
	case err == nil:
		c.cfg.Logger.Info("console: "+j.Verb+" finished", attrs...)
	case errors.Is(err, errConsoleClosed) || errors.Is(err, errCloseTimedOut):
		c.cfg.Logger.Warn("console: "+j.Verb+" stopped with the console: run it again to finish", append(attrs, "err", c.errorText(err))...)
	default:
		c.cfg.Logger.Error("console: "+j.Verb+" failed", append(attrs, "err", c.errorText(err))...)
	}
}
