package console

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Every page answers with what the on-call engineer comes for.
func TestPagesShowTheFixture(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	group := b.group(t)
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/", []string{"4 dead messages", "payments", "shipping", "1 dead row in the outbox", "No maintenance leader", "<svg class=\"spark\""}},
		{"/failures", []string{group, "payment gateway timeout after &lt;n&gt;s", "card declined", "<svg class=\"spark\"", "Replay…"}},
		{"/failures?window=1h&consumer=shipping", []string{"LabelPrinted"}},
		{"/messages?consumer=payments&group=" + group, []string{"order-1", "order-2", "order-3", `name="id" value="order-1"`, "Replay ticked…"}},
		{"/messages?status=done", []string{"done-1"}},
		{"/message?consumer=payments&id=order-2", []string{"&#34;cents&#34;: 999", "traceparent", "attempt 2 failed", "main.charge(...)", "Discard…"}},
		{"/message?id=order-2", []string{"ChargeCard", "Replay…"}},
		{"/outbox", []string{"019a0000-0000-7000-8000-000000000002", "no responders", "Retry every dead row…"}},
		{"/outbox/row?id=019a0000-0000-7000-8000-000000000002", []string{"OrderPaid", "attempt 3 failed"}},
		{"/scheduled", []string{"No scheduled replay"}},
		{"/audit", []string{"No operator action recorded"}},
	} {
		status, body := b.get(t, tc.path)
		require.Equal(t, http.StatusOK, status, "%s: %s", tc.path, body)
		for _, w := range tc.want {
			require.Contains(t, body, w, tc.path)
		}
	}
}

// Asking for what does not exist says so, with a 404 or 400 and a page
// that says what to do.
func TestPagesNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	for path, want := range map[string]int{
		"/message?consumer=payments&id=nope": http.StatusNotFound,
		"/message?id=nope":                   http.StatusNotFound,
		"/message":                           http.StatusBadRequest,
		"/outbox/row?id=not-a-uuid":          http.StatusBadRequest,
		"/messages?group=xyz":                http.StatusBadRequest,
		"/messages?before=-4":                http.StatusBadRequest,
		"/outbox?status=lost":                http.StatusBadRequest,
		"/audit?action=explode":              http.StatusBadRequest,
		"/failures?window=2d":                http.StatusBadRequest,
		"/jobs/99":                           http.StatusNotFound,
		"/?db=elsewhere":                     http.StatusNotFound,
		"/nowhere":                           http.StatusNotFound,
	} {
		status, body := b.get(t, path)
		require.Equal(t, want, status, "%s: %s", path, body)
	}
}

// The list pages by arrival order: a full page links to the next, which
// starts below it.
func TestMessagesPages(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.exec(t, `INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, bucket)
		SELECT 'bulk', 'm-' || g, 'Ping', 'pending', 0, 3, '\x00', '', /* schema */inbox_bucket('m-' || g) FROM generate_series(1, 60) AS g`)
	status, body := b.get(t, "/messages?consumer=bulk&status=pending")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, ">m-60<")
	require.NotContains(t, body, ">m-10<", "the first page holds the newest 50")
	next := nextLink.FindStringSubmatch(body)
	require.NotNil(t, next, "a full page links to the next")
	status, body = b.get(t, html.UnescapeString(next[1]))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, ">m-10<")
	require.Contains(t, body, ">m-1<")
	require.NotContains(t, body, ">m-11<")
	require.Nil(t, nextLink.FindStringSubmatch(body), "the last page links to no next")
}

// nextLink finds the messages page's link to the next page.
var nextLink = regexp.MustCompile(`<a rel="next" href="([^"]+)"`)

// An error page says what failed, on which target, and what to do next:
// a schema that is not migrated shows its error and the fix on that
// target's pages only, with a link to try again and none that loops back
// to the page that failed.
func TestErrorPagesSayWhereAndWhatNext(t *testing.T) {
	t.Parallel()
	missing, err := admin.New(pgtest.Pool(t), admin.Config{Schema: "t_console_no_such_schema"})
	require.NoError(t, err)
	b := setup(t, Config{Targets: []Target{{Admin: missing, Name: "missing"}}})

	status, body := b.get(t, "/?db=missing")
	require.Equal(t, http.StatusInternalServerError, status)
	require.Contains(t, body, "<h1>Failed</h1>")
	require.Contains(t, body, "run inboxctl migrate up")
	require.Contains(t, body, "This came from target <strong>missing</strong>: schema t_console_no_such_schema.")
	require.Contains(t, body, `<a href="/?db=missing">Try again</a>`)
	require.NotContains(t, body, "Back to the overview", "the overview is what failed")
	status, body = b.get(t, "/failures?db=missing")
	require.Equal(t, http.StatusInternalServerError, status)
	require.Contains(t, body, `<a href="/failures?db=missing">Try again</a> · <a href="/?db=missing">Back to the overview</a>`)
	status, _ = b.get(t, "/")
	require.Equal(t, http.StatusOK, status, "the other target is not affected")

	status, body = b.get(t, "/message?consumer=payments&id=nope")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, body, "leave the consumer out")
	require.NotContains(t, body, "Try again", "asking again for what is not there does not help")
	require.NotContains(t, b.logs.String(), "nope", "a 404 is not the console's failure, and is not logged")
}

// A message that failed is never said to be processed, even when its row
// keeps a processed_at from a claim whose in-transaction handler failed.
func TestMessageProcessedOnlyWhenDone(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.exec(t, `UPDATE /* schema */inbox SET processed_at = now() WHERE message_id = 'order-1'`)
	_, body := b.get(t, "/message?consumer=payments&id=order-1")
	require.NotContains(t, body, "<dt>Processed</dt>")
	_, body = b.get(t, "/message?consumer=payments&id=done-1")
	require.Contains(t, body, "<dt>Processed</dt>")
}

// The failures page refreshes itself, as the overview does, and so does
// an error page for a GET that failed on the server's side (a schema
// being migrated, a database under strain), which then shows the page
// asked for once it can; a request's own mistake (404) does not, nor an
// action.
func TestFailuresAndErrorPagesRefresh(t *testing.T) {
	t.Parallel()
	missing, err := admin.New(pgtest.Pool(t), admin.Config{Schema: "t_console_no_such_schema"})
	require.NoError(t, err)
	b := setup(t, Config{Targets: []Target{{Admin: missing, Name: "missing"}}})
	refresh := regexp.MustCompile(`<meta http-equiv="refresh" content="(\d+)">`)

	status, body := b.get(t, "/failures")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, []string{`<meta http-equiv="refresh" content="15">`, "15"}, refresh.FindStringSubmatch(body))
	require.Contains(t, body, "it refreshes every 15 s")

	for _, path := range []string{"/failures?db=missing", "/?db=missing", "/messages?db=missing"} {
		status, body = b.get(t, path)
		require.Equal(t, http.StatusInternalServerError, status, path)
		require.Equal(t, []string{`<meta http-equiv="refresh" content="15">`, "15"}, refresh.FindStringSubmatch(body), path)
		require.Contains(t, body, "This page tries again every 15 s", path)
	}
	for _, path := range []string{"/message?consumer=payments&id=nope", "/failures?window=2d"} {
		_, body = b.get(t, path)
		require.NotRegexp(t, refresh, body, "%s: asking again for what is not there does not help", path)
	}
	resp, body := b.post(t, "/replay", url.Values{"db": {"missing"}, "scope": {"all"}, "consumer": {"payments"}})
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, body)
	require.NotRegexp(t, refresh, body, "an action is never posted again by itself")
}

// With more dead messages than the failures page reads, its counts are
// marked ≥, a note says why and links to the exact count, which reads
// them all and does not refresh itself.
func TestFailuresPagePartial(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               last_error, bucket)
		SELECT 'payments', 'flood-' || g, 'ChargeCard', 'dead', 3, 3, '\x00'::bytea, ''::bytea,
		       'gateway timeout after ' || g || 's', /* schema */inbox_bucket('flood-' || g)
		FROM generate_series(1, $1::int) AS g`, admin.FailuresReadDefault)

	status, body := b.get(t, "/failures?consumer=payments")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `">≥2,000</a></td>`)
	require.Contains(t, body, "More than 2,000 dead and failing messages")
	require.Contains(t, body, `<a href="/failures?consumer=payments&amp;db=test&amp;exact=1&amp;window=24h">Count them all</a>`)
	require.NotContains(t, body, "card declined", "the fixture's older groups are not among the newest 2,000")
	require.Contains(t, body, `<meta http-equiv="refresh"`)

	status, body = b.get(t, "/failures?consumer=payments&window=24h&exact=1")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `">2,000</a></td>`)
	require.Contains(t, body, "card declined")
	require.NotContains(t, body, "≥")
	require.NotContains(t, body, `<meta http-equiv="refresh"`, "an exact count is read once, when asked")
	require.Contains(t, body, `<input type="hidden" name="exact" value="1">`, "changing the consumer or window keeps it exact")
}
