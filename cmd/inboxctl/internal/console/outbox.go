package console

import (
	"context"
	"errors"
	"net/http"

	"github.com/google/uuid"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// outboxShown is how many rows the outbox page lists.
const outboxShown = 50

// outboxView is what the outbox page shows.
type outboxView struct {
	Rows     []admin.OutboxMessage
	Stats    admin.OutboxStats
	Status   string
	Statuses []pgbox.OutboxStatus
}

// outbox shows the outbox backlog and its newest rows in one status, dead
// ones by default, with boxes to tick for a retry.
func (c *Console) outbox(w http.ResponseWriter, r *http.Request, t *Target) error {
	v := outboxView{Status: r.FormValue("status"), Statuses: pgbox.OutboxStatuses()}
	if v.Status == "" {
		v.Status = string(pgbox.OutboxDead)
	}
	st, err := t.Admin.OutboxStats(r.Context())
	if err != nil {
		return err
	}
	v.Stats = *st
	f := admin.OutboxFilter{Statuses: []pgbox.OutboxStatus{pgbox.OutboxStatus(v.Status)}}
	if err := f.Validate(); err != nil {
		return httpError(http.StatusBadRequest, "%s", err)
	}
	err = t.Admin.OutboxList(r.Context(), admin.OutboxListOptions{Filter: f, Limit: outboxShown}, func(m admin.OutboxMessage) error {
		v.Rows = append(v.Rows, m)
		return nil
	})
	if err != nil {
		return err
	}
	return c.render(w, r, t, http.StatusOK, "outbox", view{Title: "Outbox", Data: v})
}

// outboxRow shows one outbox row in full.
func (c *Console) outboxRow(w http.ResponseWriter, r *http.Request, t *Target) error {
	id, err := uuid.Parse(r.FormValue("id"))
	if err != nil {
		return httpError(http.StatusBadRequest, "%q is not an outbox row's id (a UUID): follow a link from the outbox page.", r.FormValue("id"))
	}
	d, err := t.Admin.OutboxShow(r.Context(), id)
	if errors.Is(err, admin.ErrNotFound) {
		return httpError(http.StatusNotFound, "The outbox of schema %s holds no row %s (a published row is deleted after its retention).", t.Admin.Schema(), id)
	}
	if err != nil {
		return err
	}
	return c.render(w, r, t, http.StatusOK, "outbox_row", view{Title: "Outbox row " + id.String(), Nav: "outbox", Data: d})
}

// outboxRetry puts dead outbox rows back to pending: the ticked ones, or
// every dead row, after a confirmation showing how many.
func (c *Console) outboxRetry(w http.ResponseWriter, r *http.Request, t *Target) error {
	ctx := r.Context()
	all := r.PostFormValue("scope") == "all"
	var (
		ids    []uuid.UUID
		rows   []admin.OutboxMessage
		hidden = []field{{"scope", r.PostFormValue("scope")}}
		n      int64
	)
	if all {
		st, err := t.Admin.OutboxStats(ctx)
		if err != nil {
			return err
		}
		n = st.Dead
	} else {
		ids = []uuid.UUID{}
		for _, s := range r.PostForm["id"] {
			id, err := uuid.Parse(s)
			if err != nil {
				return httpError(http.StatusBadRequest, "%q is not an outbox row's id (a UUID). Nothing was changed.", s)
			}
			d, err := t.Admin.OutboxShow(ctx, id)
			if err != nil && !errors.Is(err, admin.ErrNotFound) {
				return err
			}
			if d != nil && d.Status == pgbox.OutboxDead {
				ids, rows, n = append(ids, id), append(rows, d.OutboxMessage), n+1
				hidden = append(hidden, field{"id", s})
			}
		}
		if len(r.PostForm["id"]) == 0 {
			return httpError(http.StatusBadRequest, "Nothing selected: tick dead rows in the list, or use the button for every dead row.")
		}
	}
	back := link(t.Name, "/outbox")
	what := "every dead outbox row"
	if !all {
		what = "the dead rows among the " + plural(int64(len(r.PostForm["id"])), "row") + " ticked"
	}
	if !confirmed(r) {
		return c.render(w, r, t, http.StatusOK, "confirm", view{Title: "Confirm: retry", Nav: "outbox", Data: confirmView{
			Action: "/outbox/retry", Back: back, Count: n, Hidden: hidden, Noun: "outbox row", Outbox: rows, Verb: "retry", What: what,
		}})
	}
	if n == 0 {
		return httpError(http.StatusConflict, "Nothing to retry: none of the rows is dead now. Nothing was changed.")
	}
	a := actor(r)
	return c.startJob(w, r, t, a, &job{Matched: n, Next: back, Noun: "outbox row", Past: "retried", Selection: what, Verb: "retry"},
		func(ctx context.Context, progress func(int64)) (int64, error) {
			return t.Admin.OutboxRetry(ctx, admin.OutboxRetryOptions{Actor: a, IDs: ids, ProgressFunc: progress})
		})
}
