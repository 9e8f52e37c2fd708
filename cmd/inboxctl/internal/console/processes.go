package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// releaseLeases ends the leases a dead process's claims hold, after a
// confirmation (admin.ReleaseLeases). The console releases dead processes
// only: forcing the release of a live one, whose handlers may still run
// the messages, is left to inboxctl processes release --force.
func (c *Console) releaseLeases(w http.ResponseWriter, r *http.Request, t *Target) error {
	id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return httpError(http.StatusBadRequest, "%q is not a process id. Nothing was changed.", r.PostFormValue("id"))
	}
	ps, err := t.Admin.Processes(r.Context())
	if err != nil {
		return err
	}
	var p *admin.Process
	for i := range ps.Processes {
		if ps.Processes[i].ID == id {
			p = &ps.Processes[i]
		}
	}
	if p == nil {
		return httpError(http.StatusNotFound, "No process %d is registered: it stopped cleanly (and holds no leases), or its row was pruned. Nothing was changed.", id)
	}
	if p.State != admin.ProcessDead {
		return httpError(http.StatusConflict, "%s %s (id %d) is %s: seen %s ago, within its last %d heartbeats. The console releases only a dead process's leases; if you know it is gone, inboxctl processes release %d --force does it. Nothing was changed.",
			p.Kind, p.Name, id, p.State, span(time.Duration(p.SinceSeen)), ps.DeadAfter, id)
	}
	noun, takeover := "leased message", "a live dispatcher of "+p.Consumer
	if p.Kind == pgbox.ProcessRelay {
		noun, takeover = "leased outbox row", "a live relay"
	}
	back := link(t.Name, "/")
	if !confirmed(r) {
		what := fmt.Sprintf("held by dead %s %s, id %d, host %s, pid %d, last seen %s ago; %s takes them over at once, and the lost attempt counts",
			p.Kind, p.Name, id, p.Host, p.PID, span(time.Duration(p.SinceSeen)), takeover)
		if p.Leases > 0 {
			what += ", where their leases would end at " + stamp(p.LeasesEnd)
		}
		return c.render(w, r, t, http.StatusOK, "confirm", view{Title: "Confirm: release", Nav: "overview", Data: confirmView{
			Action: "/processes/release", Back: back, Count: p.Leases, Hidden: []field{{"id", strconv.FormatInt(id, 10)}},
			Noun: noun, Verb: "release", What: what,
		}})
	}
	a := actor(r)
	n, err := t.Admin.ReleaseLeases(r.Context(), admin.ReleaseLeasesOptions{Actor: a, ProcessID: id})
	if errors.Is(err, admin.ErrProcessAlive) {
		return httpError(http.StatusConflict, "%s %s (id %d) came back to life since this page was read: nothing was released.", p.Kind, p.Name, id)
	}
	if err != nil {
		return err
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: leases released", "target", t.Name, "user", a.Name, "remote", a.Host,
		"process", id, "released", n)
	return seeOther(w, r, back)
}
