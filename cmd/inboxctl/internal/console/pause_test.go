package console

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
)

// pauses returns the target's pauses.
func (b *testBundle) pauses(t *testing.T) []admin.Pause {
	t.Helper()
	list, err := b.adm.Pauses(context.Background(), "")
	require.NoError(t, err)
	return list
}

// Pausing a consumer takes two steps, from its row on the overview: the
// first asks for the reason and changes nothing; the confirmation pauses
// it, audited as the console's user, and the overview then shows it
// paused, by whom, since when and why, with a button to resume it in
// place of the one to pause it.
func TestPauseFromTheOverview(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	_, body := b.get(t, "/")
	require.Contains(t, body, `<form method="post" action="/pause">`)
	require.NotContains(t, body, "Paused:")

	form := url.Values{"consumer": {"payments"}}
	resp, body := b.post(t, "/pause", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `This would pause <strong class="count">1 consumer</strong> (consumer &#34;payments&#34;: its dispatchers, in every process, stop claiming`)
	require.Contains(t, body, `name="note" size="60" required`)
	require.Empty(t, b.pauses(t), "the first step changes nothing")

	form.Set("confirmed", "yes")
	resp, body = b.post(t, "/pause", form)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	require.Contains(t, body, "A reason is required to pause")
	require.Empty(t, b.pauses(t))

	form.Set("note", `gateway down <script>alert("x")</script>`)
	resp, body = b.post(t, "/pause", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Equal(t, "/?db=test", resp.Header.Get("Location"))
	pauses := b.pauses(t)
	require.Len(t, pauses, 1)
	require.Equal(t, "console", pauses[0].PausedBy)
	rec := b.waitAudit(t, admin.AuditPause)
	require.Equal(t, pauses[0].AuditID, rec.ID)
	require.Contains(t, b.logs.String(), "console: paused")

	_, body = b.get(t, "/")
	require.Contains(t, body, `<strong>Paused:</strong> consumer &#34;payments&#34;, by console since <time`)
	require.Contains(t, body, `“gateway down &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;”`, "the reason is text, escaped")
	require.Contains(t, body, `<form method="post" action="/resume">`)
	require.Contains(t, body, `<span class="state paused">paused</span>`)
	require.NotContains(t, body, `value="payments"><button type="submit" class="quiet">Pause…</button>`, "a paused consumer offers resume, not pause")
	require.Contains(t, body, `value="shipping"><button type="submit" class="quiet">Pause…</button>`)

	resp, body = b.post(t, "/pause", url.Values{"consumer": {"payments"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, "Consumer &#34;payments&#34; is already paused by console since ")
	require.Contains(t, body, "Nothing was changed: resume it first")
}

// An event type is paused from its failure group, beside the consumer's
// own pause; resuming the consumer leaves the event type paused, and says
// so first; resuming what is not paused changes nothing.
func TestPauseEventTypeAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	_, body := b.get(t, "/failures")
	require.Contains(t, body, `<input type="hidden" name="event_type" value="ChargeCard"><button type="submit" class="quiet" title="stop claiming the ChargeCard messages of payments until resumed">Pause…</button>`)

	resp, body := b.post(t, "/pause", url.Values{"consumer": {"payments"}, "event_type": {"ChargeCard"}})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `This would pause <strong class="count">1 event type</strong> (event type &#34;ChargeCard&#34; of consumer &#34;payments&#34;`)
	resp, body = b.post(t, "/pause", url.Values{"consumer": {"payments"}, "event_type": {"ChargeCard"}, "confirmed": {"yes"}, "note": {"card bug"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	_, body = b.get(t, "/")
	require.Contains(t, body, `<span class="state paused">1 event type paused</span>`)
	require.Contains(t, body, `value="payments"><button type="submit" class="quiet">Pause…</button>`, "the consumer as a whole can still be paused")
	resp, body = b.post(t, "/pause", url.Values{"consumer": {"payments"}, "confirmed": {"yes"}, "note": {"maintenance"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Len(t, b.pauses(t), 2)

	resp, body = b.post(t, "/resume", url.Values{"consumer": {"payments"}})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `This would resume <strong class="count">1 consumer</strong> (consumer &#34;payments&#34;, paused by console since `)
	require.Contains(t, body, `: &#34;maintenance&#34;; the pauses of its event types (1) stay in place)`)
	require.Len(t, b.pauses(t), 2, "the first step changes nothing")
	resp, body = b.post(t, "/resume", url.Values{"consumer": {"payments"}, "confirmed": {"yes"}, "note": {"done"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	pauses := b.pauses(t)
	require.Len(t, pauses, 1)
	require.Equal(t, "ChargeCard", pauses[0].EventType)
	rec := b.waitAudit(t, admin.AuditResume)
	require.Equal(t, "done", rec.Note)
	require.Contains(t, b.logs.String(), "console: resumed")

	resp, body = b.post(t, "/resume", url.Values{"consumer": {"payments"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, "Nothing to resume: consumer &#34;payments&#34; is not paused")
	resp, body = b.post(t, "/resume", url.Values{"consumer": {"payments"}, "event_type": {"ChargeCard"}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Empty(t, b.pauses(t))
}

// A consumer pgbox has not seen is refused, with the known ones, and a
// form without a consumer is a bad request; nothing is changed.
func TestPauseRefusesUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	resp, body := b.post(t, "/pause", url.Values{"consumer": {"paymnts"}, "confirmed": {"yes"}, "note": {"x"}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, body, `consumer &#34;paymnts&#34; is unknown`)
	require.Contains(t, body, `known consumers: &#34;payments&#34;, &#34;shipping&#34;`)
	resp, body = b.post(t, "/pause", url.Values{"confirmed": {"yes"}, "note": {"x"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "No consumer named")
	require.Empty(t, b.pauses(t))
}
