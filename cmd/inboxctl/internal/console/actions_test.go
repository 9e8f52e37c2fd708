package console

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
)

// waitAudit waits for the newest audit record of action to end, and
// returns it.
func (b *testBundle) waitAudit(t *testing.T, action admin.AuditAction) admin.AuditRecord {
	t.Helper()
	var rec admin.AuditRecord
	require.Eventually(t, func() bool {
		records, err := b.adm.AuditLog(context.Background(), admin.AuditLogOptions{Action: action, Limit: 1})
		require.NoError(t, err)
		if len(records) == 0 || records[0].State == admin.AuditRunning {
			return false
		}
		rec = records[0]
		return true
	}, 10*time.Second, 10*time.Millisecond, "no finished %s in the audit log", action)
	return rec
}

// jobLink finds where an action sent the browser: its job's page.
var jobLink = regexp.MustCompile(`^/jobs/(\d+)\?db=test$`)

// The replay confirmation warns that a scheduled or throttled replay
// would wait only when no maintainer leads.
func TestReplayConfirmationWarnsOnlyWithoutALeader(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	form := url.Values{"scope": {"all"}, "consumer": {"payments"}, "status": {"dead"}}
	const warning = "No maintenance leader: no maintainer runs on this schema"
	_, body := b.post(t, "/replay", form)
	require.Contains(t, body, warning)

	b.exec(t, `INSERT INTO /* schema */river_leader (leader_id, elected_at, expires_at) VALUES ('river-1', now(), now() + interval '1 hour')`)
	_, body = b.post(t, "/replay", form)
	require.Contains(t, body, "This would replay")
	require.NotContains(t, body, warning, "a maintainer leads")
}

// Replaying a group takes two steps: the first shows the dry-run count and
// the newest messages, and changes nothing; the confirmation starts the
// replay in the background and sends the browser to its progress.
func TestReplayGroupAsksThenRunsInTheBackground(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	group := b.group(t)
	form := url.Values{"scope": {"all"}, "consumer": {"payments"}, "group": {group}}

	resp, body := b.post(t, "/replay", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "This would replay <strong class=\"count\">3 messages</strong>")
	require.Contains(t, body, "Nothing has been changed yet")
	require.Contains(t, body, `name="confirmed" value="yes"`)
	require.Contains(t, body, "No maintenance leader: no maintainer runs on this schema, so a replay scheduled for later or throttled waits",
		"no maintainer runs in the test: the form says so before a replay is scheduled")
	require.Equal(t, 3, b.count(t, "status = 'dead' AND consumer = 'payments'"), "the first step changes nothing")

	form.Set("confirmed", "yes")
	form.Set("note", "gateway fixed, INC-9")
	resp, body = b.post(t, "/replay", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Regexp(t, jobLink, resp.Header.Get("Location"))
	rec := b.waitAudit(t, admin.AuditReplay)
	require.Equal(t, admin.AuditFinished, rec.State)
	require.EqualValues(t, 3, rec.Affected)
	require.Equal(t, "console", rec.Actor.Name)
	require.Equal(t, 0, b.count(t, "status = 'dead' AND consumer = 'payments'"))

	status, body := b.get(t, resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "Finished")
	require.Contains(t, body, "3</span> replayed of 3")
	require.Contains(t, b.logs.String(), "console: replay started")
}

// Ticked messages are replayed or discarded, and only they; a discard
// needs a reason.
func TestSelectionDiscardNeedsAReason(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	form := url.Values{"scope": {"selected"}, "consumer": {"payments"}, "id": {"order-1", "order-2"}}
	resp, body := b.post(t, "/discard", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "This would discard <strong class=\"count\">2 messages</strong>")

	form.Set("confirmed", "yes")
	resp, body = b.post(t, "/discard", form)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	require.Contains(t, body, "A reason is required")
	require.Equal(t, 0, b.count(t, "status = 'discarded'"))

	form.Set("note", "test orders")
	resp, _ = b.post(t, "/discard", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	rec := b.waitAudit(t, admin.AuditDiscard)
	require.EqualValues(t, 2, rec.Affected)
	require.Equal(t, "test orders", rec.Note)
	require.Equal(t, 2, b.count(t, "status = 'discarded' AND message_id IN ('order-1', 'order-2')"))
	require.Equal(t, 1, b.count(t, "status = 'dead' AND message_id = 'order-3'"), "an unticked message is left alone")

	resp, body = b.post(t, "/replay", url.Values{"scope": {"selected"}, "consumer": {"payments"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "Nothing selected")
	resp, body = b.post(t, "/replay", url.Values{"scope": {"selected"}, "id": {"order-3"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "need their consumer")
}

// A throttled replay is scheduled for the maintenance job, shows on the
// scheduled page with its progress, and can be cancelled, after a
// confirmation; each step is in the audit log.
func TestThrottledReplayScheduledAndCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	form := url.Values{"scope": {"all"}, "consumer": {"payments"}, "status": {"dead"}, "confirmed": {"yes"},
		"pace": {"rate"}, "rate": {"2"}, "rate_unit": {"min"}, "note": {"slowly"}}
	resp, body := b.post(t, "/replay", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Contains(t, resp.Header.Get("Location"), "/scheduled?")
	list, err := b.adm.ScheduledReplays(context.Background(), 0)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.InDelta(t, 2.0/60, list[0].Rate, 1e-9)
	require.EqualValues(t, 3, list[0].Selected)

	status, body := b.get(t, resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "2/min")
	require.Contains(t, body, "0 of 3")
	require.Contains(t, body, `class="highlight"`)
	require.Contains(t, body, "No maintenance leader", "no maintainer runs in the test: the replay would wait")

	id := url.Values{"id": {strconv.FormatInt(list[0].ID, 10)}}
	resp, body = b.post(t, "/scheduled/cancel", id)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "This would cancel")
	id.Set("confirmed", "yes")
	resp, body = b.post(t, "/scheduled/cancel", id)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	list, err = b.adm.ScheduledReplays(context.Background(), 0)
	require.NoError(t, err)
	require.Equal(t, admin.ReplayCancelled, list[0].State)
	require.Equal(t, "console", b.waitAudit(t, admin.AuditCancelScheduledReplay).Actor.Name)

	resp, body = b.post(t, "/scheduled/cancel", id)
	require.Equal(t, http.StatusConflict, resp.StatusCode, "cancelling an ended replay is news, not a failure")
	require.Contains(t, body, "has already ended (cancelled)")
	require.NotContains(t, b.logs.String(), "request failed")
	id.Set("id", "999")
	resp, _ = b.post(t, "/scheduled/cancel", id)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	form.Set("pace", "over")
	form.Del("rate")
	form.Set("over", "-3")
	form.Set("over_unit", "h")
	resp, body = b.post(t, "/replay", form)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "not a positive number")
	form.Set("pace", "")
	form.Del("over")
	form.Set("when", "at")
	form.Set("at", "2001-01-01T00:00")
	resp, body = b.post(t, "/replay", form)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "in the past")
	form.Set("at", time.Now().UTC().Add(2*time.Hour).Format(atLayout))
	resp, _ = b.post(t, "/replay", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
}

// Dead outbox rows are retried, the ticked ones or all, after a
// confirmation.
func TestOutboxRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	form := url.Values{"scope": {"selected"}, "id": {"019a0000-0000-7000-8000-000000000002"}}
	resp, body := b.post(t, "/outbox/retry", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "This would retry <strong class=\"count\">1 outbox row</strong>")
	form.Set("confirmed", "yes")
	resp, _ = b.post(t, "/outbox/retry", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.EqualValues(t, 1, b.waitAudit(t, admin.AuditOutboxRetry).Affected)
	resp, body = b.post(t, "/outbox/retry", url.Values{"scope": {"all"}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode, body)
	require.Contains(t, body, "Nothing to retry")
}

// A dry run counts what the action then changes, under the same filter: a
// discard of the failed messages counts and discards the dead ones only,
// and a discard of a selection that holds no dead message (retrying ones)
// is refused rather than widened to the consumer's dead messages.
func TestDiscardCountsWhatItDiscards(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	retrying := url.Values{"scope": {"all"}, "consumer": {"payments"}, "status": {"pending"}, "note": {"x"}}
	resp, body := b.post(t, "/discard", retrying)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	require.Contains(t, body, "Only dead messages can be discarded")
	retrying.Set("confirmed", "yes")
	resp, _ = b.post(t, "/discard", retrying)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, 3, b.count(t, "consumer = 'payments' AND status = 'dead'"), "nothing was discarded")
	_, body = b.get(t, "/messages?consumer=payments&status=pending")
	require.Contains(t, body, "Replay every match…")
	require.NotContains(t, body, "Discard every match…", "a list of retrying messages offers no discard")
	_, body = b.get(t, "/messages?consumer=payments&status=done")
	require.NotContains(t, body, `method="post"`, "a list of done messages offers no action")

	failed := url.Values{"scope": {"all"}, "consumer": {"payments"}, "status": {"failed"}}
	resp, body = b.post(t, "/discard", failed)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "This would discard <strong class=\"count\">3 messages</strong>", "the dead ones, not the retrying one")
	failed.Set("confirmed", "yes")
	failed.Set("note", "test orders")
	resp, _ = b.post(t, "/discard", failed)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.EqualValues(t, 3, b.waitAudit(t, admin.AuditDiscard).Affected)
	require.Equal(t, 1, b.count(t, "message_id = 'declined-1' AND status = 'pending'"), "the retrying message is left alone")
}

// A rate, a duration or a time typed into the confirmation is never
// ignored: without its choice it is taken as chosen (the form the
// console's page now posts: the filled field is the choice), and one that
// contradicts the choice made, or another filled field, is refused with
// what to do. Before, pace=&rate=1 replayed the whole selection at once.
func TestThrottleIsNeverIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	base := url.Values{"scope": {"all"}, "consumer": {"payments"}, "status": {"dead"}, "confirmed": {"yes"}, "rate_unit": {"s"},
		"over_unit": {"h"}}
	post := func(kv ...string) (*http.Response, string) {
		form := url.Values{}
		for k, v := range base {
			form[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			form.Set(kv[i], kv[i+1])
		}
		return b.post(t, "/replay", form)
	}
	newest := func() admin.ScheduledReplay {
		list, err := b.adm.ScheduledReplays(context.Background(), 0)
		require.NoError(t, err)
		require.NotEmpty(t, list)
		return slices.MaxFunc(list, func(a, b admin.ScheduledReplay) int { return cmp.Compare(a.ID, b.ID) })
	}
	scheduled := func(what string, kv ...string) admin.ScheduledReplay {
		t.Helper()
		resp, body := post(kv...)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "%s: %s", what, body)
		require.Contains(t, resp.Header.Get("Location"), "/scheduled?", "%s is a scheduled replay, not one now", what)
		require.Equal(t, 3, b.count(t, "status = 'dead' AND consumer = 'payments'"), "%s replayed nothing yet", what)
		return newest()
	}

	r := scheduled("a rate without its choice", "pace", "", "rate", "1")
	require.InDelta(t, 1.0, r.Rate, 1e-9)
	r = scheduled("a duration without its choice", "over", "2")
	require.InDelta(t, 3.0/(2*3600), r.Rate, 1e-9, "3 messages over 2 h")
	at := time.Now().UTC().Add(3 * time.Hour).Truncate(time.Minute)
	r = scheduled("a time without its choice", "when", "", "at", at.Format(atLayout))
	require.True(t, r.RunAt.Equal(at), "%s, want %s", r.RunAt, at)

	for _, tc := range []struct {
		name string
		kv   []string
		want string
	}{
		{"a rate and a duration", []string{"rate", "1", "over", "2"}, "both"},
		{"a duration besides the rate chosen", []string{"pace", "rate", "rate", "1", "over", "2"}, "both"},
		{"a rate besides the duration chosen", []string{"pace", "over", "rate", "1", "over", "2"}, "both"},
		{"a time besides now chosen", []string{"when", "now", "at", at.Format(atLayout)}, "now"},
		{"an unknown pace", []string{"pace", "fast", "rate", "1"}, "pace"},
	} {
		resp, body := post(tc.kv...)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", tc.name, body)
		require.Contains(t, body, tc.want, tc.name)
		require.Contains(t, body, "Nothing was changed", tc.name)
		require.Equal(t, 3, b.count(t, "status = 'dead' AND consumer = 'payments'"), tc.name)
	}
	list, err := b.adm.ScheduledReplays(context.Background(), 0)
	require.NoError(t, err)
	require.Len(t, list, 3, "nothing refused was scheduled")
}
