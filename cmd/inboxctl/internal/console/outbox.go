package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/cmd/inboxctl/internal/human"
)

// outboxShown is how many rows the outbox page lists.
const outboxShown = 50

// outboxView is what the outbox page shows.
type outboxView struct {
	// Rows are the newest rows in Status.
	Rows []admin.OutboxMessage
	// Stats counts the outbox by status.
	Stats admin.OutboxStats
	// Status is the status listed: dead by default.
	Status string
	// Shown is the most rows the page lists.
	Shown int
	// Statuses are the status tabs.
	Statuses []pgbox.OutboxStatus
}

// outbox shows the outbox backlog and its newest rows in one status, dead
// ones by default, with boxes to tick for a retry.
func (c *Console) outbox(w http.ResponseWriter, r *http.Request, t *Target) error {
	v := outboxView{Shown: outboxShown, Status: r.FormValue("status"), Statuses: pgbox.OutboxStatuses()}
	if v.Status == "" {
		v.Status = string(pgbox.OutboxDead)
	}
	st, err := t.Admin.OutboxStats(r.Context(), admin.StatsOptions{})
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
	sel, err := deadOutboxRows(r, t)
	if err != nil {
		return err
	}
	back := link(t.Name, "/outbox")
	if !confirmed(r) {
		return c.render(w, r, t, http.StatusOK, "confirm", view{Title: "Confirm: retry", Nav: "outbox", Data: confirmView{
			Action: "/outbox/retry", Back: back, Count: sel.count, Hidden: sel.hidden, Noun: "outbox row", Outbox: sel.rows,
			Verb: "retry", What: sel.what,
		}})
	}
	if sel.count == 0 {
		return httpError(http.StatusConflict, "Nothing to retry: none of the rows is dead now (the relay, or another operator, got there first). Nothing was changed.")
	}
	a := actor(r)
	return c.startJob(w, r, t, a, &job{Matched: sel.count, Next: back, Noun: "outbox row", Past: "retried", Selection: sel.what, Verb: "retry",
		key: fmt.Sprintf("retry %t %v", sel.ids == nil, sel.ids)},
		func(ctx context.Context, progress func(int64)) (int64, error) {
			return t.Admin.OutboxRetry(ctx, admin.OutboxRetryOptions{Actor: a, IDs: sel.ids, ProgressFunc: progress})
		})
}

// outboxSelection is what an outbox retry acts on, counted as OutboxRetry
// counts it: only the dead rows.
type outboxSelection struct {
	// count is how many rows a retry would put back now.
	count int64
	// hidden carries the selection over to the confirmation's second step.
	hidden []field
	// ids are the ticked rows that are dead; nil for every dead row.
	ids []uuid.UUID
	// rows are the dead rows ticked, or the newest dead rows, to show.
	rows []admin.OutboxMessage
	// what says what is selected, in words.
	what string
}

// deadOutboxRows reads the rows r ticked (or scope=all: every dead row)
// and finds which of them are dead now.
func deadOutboxRows(r *http.Request, t *Target) (outboxSelection, error) {
	ctx := r.Context()
	sel := outboxSelection{hidden: []field{{"scope", r.PostFormValue("scope")}}}
	if r.PostFormValue("scope") == "all" {
		st, err := t.Admin.OutboxStats(ctx, admin.StatsOptions{})
		if err != nil {
			return sel, err
		}
		sel.count, sel.what = st.Dead, "every dead outbox row"
		err = t.Admin.OutboxList(ctx, admin.OutboxListOptions{Filter: admin.OutboxFilter{Statuses: []pgbox.OutboxStatus{pgbox.OutboxDead}},
			Limit: confirmDryRun}, func(m admin.OutboxMessage) error {
			sel.rows = append(sel.rows, m)
			return nil
		})
		return sel, err
	}
	ticked := r.PostForm["id"]
	if len(ticked) == 0 {
		return sel, httpError(http.StatusBadRequest, "Nothing selected: tick dead rows in the list, or use the button for every dead row.")
	}
	sel.ids, sel.what = []uuid.UUID{}, "the dead rows among the "+human.Plural(int64(len(ticked)), "row")+" ticked"
	for _, s := range ticked {
		id, err := uuid.Parse(s)
		if err != nil {
			return sel, httpError(http.StatusBadRequest, "%q is not an outbox row's id (a UUID). Nothing was changed.", s)
		}
		d, err := t.Admin.OutboxShow(ctx, id)
		if err != nil && !errors.Is(err, admin.ErrNotFound) {
			return sel, err
		}
		if d != nil && d.Status == pgbox.OutboxDead {
			sel.count++
			sel.ids, sel.rows = append(sel.ids, id), append(sel.rows, d.OutboxMessage)
			sel.hidden = append(sel.hidden, field{"id", s})
		}
	}
	return sel, nil
}
