package console

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/pgbox/pgbox/admin"
)

// pauseEffect says what a pause does, on its confirmation.
const pauseEffect = "its dispatchers, in every process, stop claiming within a poll interval; messages keep arriving and wait, in order, until resumed"

// pauseTarget reads the consumer and event type an action on a pause
// names, and the noun for it: "consumer" or "event type".
func pauseTarget(r *http.Request) (consumer, eventType, noun string, err error) {
	consumer, eventType = r.PostFormValue("consumer"), strings.TrimSpace(r.PostFormValue("event_type"))
	if consumer == "" {
		return "", "", "", httpError(http.StatusBadRequest, "No consumer named: use the buttons on the overview or the failures page. Nothing was changed.")
	}
	if eventType != "" {
		return consumer, eventType, "event type", nil
	}
	return consumer, "", "consumer", nil
}

// pauseFields carries a pause's consumer and event type over to the
// confirmation's second step.
func pauseFields(consumer, eventType string) []field {
	return []field{{"consumer", consumer}, {"event_type", eventType}}
}

// pausedBy says who paused p, since when and why, for a page.
func pausedBy(p admin.Pause, now time.Time) string {
	return fmt.Sprintf("paused by %s since %s (%s): %q", p.PausedBy, stamp(p.PausedAt), ago(now, p.PausedAt), p.Reason)
}

// pause pauses a consumer, or one event type of it, after a confirmation
// that asks for the reason: pause refuses what is paused already (409,
// saying whose the pause is) and a consumer or event type pgbox has not
// seen (404, with the known ones).
func (c *Console) pause(w http.ResponseWriter, r *http.Request, t *Target) error {
	consumer, eventType, noun, err := pauseTarget(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	pauses, err := t.Admin.Pauses(ctx, consumer)
	if err != nil {
		return err
	}
	for _, p := range pauses {
		if p.EventType == eventType {
			return httpError(http.StatusConflict, "%s is already %s. Nothing was changed: resume it first to pause it anew.",
				capitalize(p.Scope()), pausedBy(p, time.Now()))
		}
	}
	back := link(t.Name, "/")
	if !confirmed(r) {
		return c.render(w, r, t, http.StatusOK, "confirm", view{Title: "Confirm: pause", Nav: "overview", Data: confirmView{
			Action: "/pause", Back: back, Count: 1, Hidden: pauseFields(consumer, eventType), Noun: noun,
			Note: "Reason, kept with the pause and in the audit log (required)", NoteRequired: true, Verb: "pause",
			What: admin.Pause{Consumer: consumer, EventType: eventType}.Scope() + ": " + pauseEffect,
		}})
	}
	reason := r.PostFormValue("note")
	if strings.TrimSpace(reason) == "" {
		return httpError(http.StatusBadRequest, "A reason is required to pause: say why, for whoever finds it paused. Nothing was changed.")
	}
	a := actor(r)
	p, err := t.Admin.Pause(ctx, admin.PauseOptions{Actor: a, Consumer: consumer, EventType: eventType, Reason: reason})
	if errors.Is(err, admin.ErrAlreadyPaused) { // paused by someone else meanwhile
		return httpError(http.StatusConflict, "%s", capitalize(err.Error()))
	}
	if err != nil {
		return err
	}
	c.cfg.Logger.InfoContext(ctx, "console: paused", "target", t.Name, "user", a.Name, "remote", a.Host,
		"consumer", p.Consumer, "event_type", p.EventType)
	return seeOther(w, r, back)
}

// resume lifts the pause of a consumer, or of one event type of it, after
// a confirmation; nothing to resume is a 409 that says so.
func (c *Console) resume(w http.ResponseWriter, r *http.Request, t *Target) error {
	consumer, eventType, noun, err := pauseTarget(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	pauses, err := t.Admin.Pauses(ctx, consumer)
	if err != nil {
		return err
	}
	var found *admin.Pause
	for i := range pauses {
		if pauses[i].EventType == eventType {
			found = &pauses[i]
		}
	}
	scope := admin.Pause{Consumer: consumer, EventType: eventType}.Scope()
	if found == nil {
		return httpError(http.StatusConflict, "Nothing to resume: %s is not paused (someone resumed it already?). Nothing was changed.", scope)
	}
	back := link(t.Name, "/")
	if !confirmed(r) {
		what := scope + ", " + pausedBy(*found, time.Now())
		if eventType == "" && len(pauses) > 1 {
			what += fmt.Sprintf("; the pauses of its event types (%d) stay in place", len(pauses)-1)
		}
		return c.render(w, r, t, http.StatusOK, "confirm", view{Title: "Confirm: resume", Nav: "overview", Data: confirmView{
			Action: "/resume", Back: back, Count: 1, Hidden: pauseFields(consumer, eventType), Noun: noun,
			Note: "Why, for the audit log (optional)", Verb: "resume", What: what,
		}})
	}
	a := actor(r)
	_, err = t.Admin.Resume(ctx, admin.ResumeOptions{Actor: a, Consumer: consumer, EventType: eventType, Note: r.PostFormValue("note")})
	if errors.Is(err, admin.ErrNotPaused) { // resumed by someone else meanwhile
		return httpError(http.StatusConflict, "Nothing to resume: %s is not paused: someone resumed it meanwhile. Nothing was changed.", scope)
	}
	if err != nil {
		return err
	}
	c.cfg.Logger.InfoContext(ctx, "console: resumed", "target", t.Name, "user", a.Name, "remote", a.Host,
		"consumer", consumer, "event_type", eventType)
	return seeOther(w, r, back)
}

// capitalize makes s begin with a capital, as a sentence does.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
