package console

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// Edit and replay takes two steps from the message's page: a form with
// the payload, then both payloads shown with nothing changed, then, once
// confirmed, the edit and the replay, audited with both payloads' SHA-256,
// and the browser back on the message.
func TestEditAndReplayAsksThenEdits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{})
	old := `{"order":2,"cents":999}`

	_, body := b.get(t, "/message?consumer=payments&id=order-2")
	require.Contains(t, body, `<form method="get" action="/message/edit">`)
	require.Contains(t, body, "Edit and replay…")
	status, body := b.get(t, "/message/edit?consumer=payments&id=order-2")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<textarea name="payload" rows="20" cols="100" spellcheck="false" required>`+html.EscapeString(old)+`</textarea>`)
	require.Contains(t, body, "The payload is JSON, so the new one must be too.")
	require.Contains(t, body, `name="previous" value="`+sha256Hex([]byte(old))+`"`)

	fixed := "{\r\n  \"order\": 2,\r\n  \"cents\": 999,\r\n  \"currency\": \"EUR\"\r\n}"
	form := url.Values{"consumer": {"payments"}, "id": {"order-2"}, "previous": {sha256Hex([]byte(old))}, "payload": {fixed},
		"note": {"currency added, INC-12"}}
	resp, body := b.post(t, "/edit", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	sent := "{\n  \"order\": 2,\n  \"cents\": 999,\n  \"currency\": \"EUR\"\n}" // the browser's CR LF made LF
	require.Contains(t, body, "Nothing has been changed yet")
	require.Contains(t, body, `<pre class="payload old">`+html.EscapeString(old)+`</pre>`)
	require.Contains(t, body, `<pre class="payload new">`+html.EscapeString(sent)+`</pre>`)
	require.Contains(t, body, sha256Hex([]byte(sent)))
	require.Contains(t, body, `name="confirmed" value="yes"`)
	d, err := b.adm.Show(ctx, "payments", "order-2")
	require.NoError(t, err)
	require.Equal(t, old, string(d.Payload), "the first step changes nothing")
	require.Equal(t, pgbox.InboxDead, d.Status)

	form.Set("confirmed", "yes")
	resp, body = b.post(t, "/edit", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Equal(t, "/message?consumer=payments&db=test&id=order-2", resp.Header.Get("Location"))
	d, err = b.adm.Show(ctx, "payments", "order-2")
	require.NoError(t, err)
	require.Equal(t, sent, string(d.Payload))
	require.Equal(t, pgbox.InboxPending, d.Status, "replayed")
	records, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{Action: admin.AuditEditPayload})
	require.NoError(t, err)
	require.Len(t, records, 1)
	require.Equal(t, "console", records[0].Actor.Name)
	require.Equal(t, "currency added, INC-12", records[0].Note)
	require.JSONEq(t, `{"consumer":"payments","ids":["order-2"],"previous_payload_sha256":"`+sha256Hex([]byte(old))+
		`","payload_sha256":"`+sha256Hex([]byte(sent))+`"}`, string(records[0].Selection))
	require.Contains(t, b.logs.String(), "console: payload edited and message replayed")

	_, body = b.get(t, "/message?consumer=payments&id=order-2")
	require.Contains(t, body, "payload edited", "the history says so")

	// Posted again (a reload, a second tab), it is refused: the payload
	// it was made from is gone.
	resp, body = b.post(t, "/edit", form)
	require.Equal(t, http.StatusConflict, resp.StatusCode, body)
	require.Contains(t, body, "changed after you opened it")
}

// Edit and replay refuses, changing nothing: a payload that is not JSON
// where the message's was, the same payload, an empty one, a message that
// is not dead, discarded or failing, one that does not exist, and one whose
// payload changed since the form was made.
func TestEditAndReplayRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	previous := sha256Hex([]byte(`{"order":1,"cents":999}`))
	for _, tc := range []struct {
		form   url.Values
		status int
		want   string
	}{
		{url.Values{"payload": {"{\"order\":1,\n\"cents\":}"}}, http.StatusBadRequest, "The message&#39;s payload is JSON and the new one is not: invalid character &#39;}&#39; looking for beginning of value (line 2)"},
		{url.Values{"payload": {`{"order":1,"cents":999}`}}, http.StatusBadRequest, "The new payload is the one the message holds"},
		{url.Values{"payload": {" \r\n "}}, http.StatusBadRequest, "The new payload is empty"},
		{url.Values{"payload": {`{}`}, "previous": {sha256Hex([]byte("older"))}}, http.StatusConflict, "changed after you opened it"},
		{url.Values{"payload": {`{}`}, "id": {"done-1"}}, http.StatusConflict, "Message done-1 is done: only a dead, discarded or failing message"},
		{url.Values{"payload": {`{}`}, "id": {"nope"}}, http.StatusNotFound, "Consumer &#34;payments&#34; holds no message &#34;nope&#34;"},
	} {
		form := url.Values{"consumer": {"payments"}, "id": {"order-1"}, "previous": {previous}, "confirmed": {"yes"}}
		for k, v := range tc.form {
			form[k] = v
		}
		resp, body := b.post(t, "/edit", form)
		require.Equal(t, tc.status, resp.StatusCode, "%v: %s", tc.form, body)
		require.Contains(t, body, tc.want, tc.form)
		require.Contains(t, body, "Nothing was changed", tc.form)
	}
	require.Equal(t, 3, b.count(t, "status = 'dead' AND consumer = 'payments'"))
	records, err := b.adm.AuditLog(context.Background(), admin.AuditLogOptions{})
	require.NoError(t, err)
	require.Empty(t, records)

	status, body := b.get(t, "/message/edit?consumer=payments&id=done-1")
	require.Equal(t, http.StatusConflict, status, body)
	_, body = b.get(t, "/message?consumer=payments&id=done-1")
	require.NotContains(t, body, "Edit and replay…", "a done message offers no edit")
}

// A payload that is not JSON (here, hostile markup) is edited as text,
// and every step shows it, and the new one, as text.
func TestEditAndReplayHostilePayload(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	status, body := b.get(t, "/message/edit?consumer=shipping&id=evil-1")
	require.Equal(t, http.StatusOK, status, body)
	requireEscaped(t, "the edit form", body)
	require.NotContains(t, body, "must be too", "the payload is not JSON")

	form := url.Values{"consumer": {"shipping"}, "id": {"evil-1"}, "previous": {sha256Hex([]byte(hostilePayload))},
		"payload": {hostilePayload + `<img src=x onerror=alert(1)>`}, "note": {hostilePayload}}
	resp, body := b.post(t, "/edit", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	requireEscaped(t, "the confirmation", body)
	require.Contains(t, body, `<input type="hidden" name="payload" value="&lt;script&gt;alert(&#34;payload&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;">`)
}

// A read-only console offers no edit: its page says so, changing nothing.
func TestEditAndReplayReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{ReadOnly: true})
	status, body := b.get(t, "/message/edit?consumer=payments&id=order-1")
	require.Equal(t, http.StatusForbidden, status, body)
	require.Contains(t, body, "read-only")
	require.NotContains(t, body, `method="post"`)
}
