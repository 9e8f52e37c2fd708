package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// editView is what the edit page shows: the form, or the confirmation of
// what it would change.
type editView struct {
	// Confirm is the second step: both payloads shown, nothing changed
	// yet; its form, posted with confirmed=yes, edits and replays.
	Confirm bool
	// Detail is the message as it is.
	Detail *admin.Detail
	// JSON says the message's payload is JSON, so the new one must be.
	JSON bool
	// New is the new payload (the confirmation's), as text.
	New string
	// NewSHA256 is its SHA-256, in hex, as the audit log records it.
	NewSHA256 string
	// Note is the operator's note.
	Note string
	// Old is the message's payload, as text.
	Old string
	// OldSHA256 is its SHA-256, in hex: the confirmation carries it, so
	// that an edit made meanwhile by someone else is not overwritten.
	OldSHA256 string
}

// editMessage is the edit page of a dead, discarded or failing message
// whose payload is text: a form with its payload to change, posted to
// /edit.
func (c *Console) editMessage(w http.ResponseWriter, r *http.Request, t *Target) error {
	if c.cfg.ReadOnly {
		return httpError(http.StatusForbidden, "This console is read-only (--read-only): it changes nothing. Use inboxctl replay ID --consumer C --payload-file F, or a console started without --read-only.")
	}
	d, err := editable(r, t, r.FormValue("consumer"), r.FormValue("id"))
	if err != nil {
		return err
	}
	return c.render(w, r, t, http.StatusOK, "edit", view{Title: "Edit and replay " + d.ID, Nav: "messages", Data: newEditView(d)})
}

// edit replaces a message's payload and replays it, in two steps: the
// first checks the new payload and shows it beside the old one, changing
// nothing; the confirmation calls admin.EditAndReplay, which audits the
// edit with both payloads' SHA-256, and sends the browser to the message.
func (c *Console) edit(w http.ResponseWriter, r *http.Request, t *Target) error {
	consumer, id := r.PostFormValue("consumer"), r.PostFormValue("id")
	d, err := editable(r, t, consumer, id)
	if err != nil {
		return err
	}
	v := newEditView(d)
	if previous := r.PostFormValue("previous"); previous != v.OldSHA256 {
		return httpError(http.StatusConflict, "The payload of %s changed after you opened it (another operator's edit?): open the message again and redo your edit from what it holds now. Nothing was changed.", id)
	}
	// A browser sends a text area's line breaks as CR LF, whatever the
	// payload held: they are made LF again.
	payload := []byte(strings.ReplaceAll(r.PostFormValue("payload"), "\r\n", "\n"))
	switch {
	case len(bytes.TrimSpace(payload)) == 0:
		return httpError(http.StatusBadRequest, "The new payload is empty: give the whole payload the handler should see. Nothing was changed.")
	case bytes.Equal(payload, d.Payload):
		return httpError(http.StatusBadRequest, "The new payload is the one the message holds: change it, or use Replay on the message's page to replay it as it is. Nothing was changed.")
	case v.JSON:
		if err := validJSON(payload); err != nil {
			return httpError(http.StatusBadRequest, "The message's payload is JSON and the new one is not: %v. Fix it and try again. Nothing was changed.", err)
		}
	}
	v.Confirm, v.New, v.NewSHA256, v.Note = true, string(payload), sha256Hex(payload), r.PostFormValue("note")
	if !confirmed(r) {
		return c.render(w, r, t, http.StatusOK, "edit", view{Title: "Confirm: edit and replay " + id, Nav: "messages", Data: v})
	}
	err = t.Admin.EditAndReplay(r.Context(), admin.EditOptions{Actor: actor(r), Consumer: consumer, ID: id, Note: v.Note, Payload: payload})
	if err := editError(err, t, consumer, id); err != nil {
		return err
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: payload edited and message replayed", "consumer", consumer, "id", id,
		"user", user(r), "previous_payload_sha256", v.OldSHA256, "payload_sha256", v.NewSHA256)
	return seeOther(w, r, link(t.Name, "/message", "consumer", consumer, "id", id))
}

// editable returns message id of consumer if its payload can be edited
// and replayed here: it exists, it is dead, discarded or failing, and its
// payload is text (a binary one is edited with inboxctl's --payload-file).
func editable(r *http.Request, t *Target, consumer, id string) (*admin.Detail, error) {
	if consumer == "" || id == "" {
		return nil, httpError(http.StatusBadRequest, "Which message? Give its consumer and id: follow the Edit and replay button on the message's page.")
	}
	d, err := t.Admin.Show(r.Context(), consumer, id)
	if err := editError(err, t, consumer, id); err != nil {
		return nil, err
	}
	switch {
	case !replayable(d):
		return nil, httpError(http.StatusConflict, "Message %s is %s: only a dead, discarded or failing message is edited and replayed. Nothing was changed.", id, d.Status)
	case !utf8.Valid(d.Payload):
		return nil, httpError(http.StatusBadRequest, "The payload of %s is binary, which a page cannot edit: write the new one to a file and run inboxctl replay %s --consumer %s --payload-file FILE. Nothing was changed.",
			id, id, consumer)
	}
	return d, nil
}

// editError turns what Show or EditAndReplay returned into the page's
// error: not found (404) and not replayable (409) say so; nil stays nil.
func editError(err error, t *Target, consumer, id string) error {
	switch {
	case errors.Is(err, admin.ErrNotFound):
		return httpError(http.StatusNotFound, "Consumer %q holds no message %q in schema %s: it may have been purged. Nothing was changed.", consumer, id, t.Admin.Schema())
	case errors.Is(err, admin.ErrNotReplayable):
		return httpError(http.StatusConflict, "Message %s is no longer dead, discarded or failing (another operator, or the dispatcher, got there first). Nothing was changed.", id)
	}
	return err
}

// replayable reports whether a replay would change d: dead, discarded, or
// pending after a failure.
func replayable(d *admin.Detail) bool {
	return d.Status == pgbox.InboxDead || d.Status == pgbox.InboxDiscarded || (d.Status == pgbox.InboxPending && d.LastError != nil)
}

// newEditView is the edit page of d, before any change.
func newEditView(d *admin.Detail) editView {
	return editView{Detail: d, JSON: json.Valid(d.Payload), Old: string(d.Payload), OldSHA256: sha256Hex(d.Payload)}
}

// validJSON returns why p is not one JSON value, with where: nil if it is.
func validJSON(p []byte) error {
	var v any
	err := json.Unmarshal(p, &v)
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		line := bytes.Count(p[:syntax.Offset], []byte("\n")) + 1
		return fmt.Errorf("%w (line %d)", syntax, line)
	}
	return err
}

// sha256Hex is p's SHA-256 in hex, as the audit log records an edit's
// payloads.
func sha256Hex(p []byte) string {
	h := sha256.Sum256(p)
	return hex.EncodeToString(h[:])
}
