package console

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
)

// The overview offers Release on a dead process holding leases, and only
// there; the action asks, then ends the leases and is audited; a live
// process is refused, with the command that forces it.
func TestReleaseLeasesOfADeadProcess(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.exec(t, `
		INSERT INTO /* schema */processes (id, kind, consumer, name, host, pid, version, heartbeat_ms, last_seen_at) VALUES
		(7, 'dispatcher', 'payments', 'live', 'h', 1, 'v', 60000, now()),
		(8, 'dispatcher', 'payments', 'payments-2b1d', 'node-b', 977, 'v', 1000, now() - interval '1 minute');
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, max_attempts, available_at, claim_token, payload_hash, payload, bucket) VALUES
		('payments', 'held', 'E', 'running', 3, now() + interval '1 hour', (8::bigint << 32) | 1, '\x00', '', /* schema */inbox_bucket('held')),
		('payments', 'other', 'E', 'running', 3, now() + interval '1 hour', (7::bigint << 32) | 1, '\x00', '', /* schema */inbox_bucket('other'))`)

	_, body := b.get(t, "/")
	require.Contains(t, body, `<input type="hidden" name="id" value="8"><button type="submit" class="quiet"`)
	require.NotContains(t, body, `name="id" value="7"><button`, "a live process offers no release")

	form := url.Values{"id": {"8"}}
	resp, body := b.post(t, "/processes/release", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `This would release <strong class="count">1 leased message</strong> (held by dead dispatcher payments-2b1d, id 8, host node-b, pid 977`)
	require.Equal(t, 2, b.count(t, "status = 'running' AND available_at > now()"), "nothing changed before the confirmation")

	form.Set("confirmed", "yes")
	resp, body = b.post(t, "/processes/release", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Equal(t, 0, b.count(t, "message_id = 'held' AND available_at > now()"))
	require.Equal(t, 1, b.count(t, "message_id = 'other' AND available_at > now()"))
	require.EqualValues(t, 1, b.waitAudit(t, admin.AuditReleaseLeases).Affected)

	resp, body = b.post(t, "/processes/release", url.Values{"id": {"7"}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode, body)
	require.Contains(t, body, "inboxctl processes release 7 --force")
	require.Equal(t, 1, b.count(t, "message_id = 'other' AND available_at > now()"))
	resp, _ = b.post(t, "/processes/release", url.Values{"id": {"99"}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
