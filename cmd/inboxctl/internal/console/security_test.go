package console

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// With credentials, a request without them, or with wrong ones, gets 401
// and a sign-in prompt; the token works as a bearer token and as a basic
// auth password under any name, and the user's password under the user's.
func TestAuthRefusedAndAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Credentials: Credentials{Token: "s3cret-token", User: "alice", Password: "alice-pw"}})
	try := func(set func(r *http.Request)) int {
		r, err := http.NewRequest(http.MethodGet, b.srv.URL+"/failures", nil)
		require.NoError(t, err)
		set(r)
		resp, _ := do(t, r)
		return resp.StatusCode
	}
	for name, set := range map[string]func(*http.Request){
		"none":              func(*http.Request) {},
		"wrong bearer":      func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-tokeN") },
		"empty bearer":      func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") },
		"wrong password":    func(r *http.Request) { r.SetBasicAuth("alice", "alice-pW") },
		"password of other": func(r *http.Request) { r.SetBasicAuth("bob", "alice-pw") },
		"token, no name":    func(r *http.Request) { r.SetBasicAuth("", "s3cret-token") },
	} {
		require.Equal(t, http.StatusUnauthorized, try(set), name)
	}
	for name, set := range map[string]func(*http.Request){
		"bearer":          func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token") },
		"token as basic":  func(r *http.Request) { r.SetBasicAuth("carol", "s3cret-token") },
		"user's password": func(r *http.Request) { r.SetBasicAuth("alice", "alice-pw") },
	} {
		require.Equal(t, http.StatusOK, try(set), name)
	}

	r, err := http.NewRequest(http.MethodGet, b.srv.URL+"/assets/console.css", nil)
	require.NoError(t, err)
	resp, _ := do(t, r)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "even the stylesheet needs credentials")
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic")
	require.Contains(t, b.logs.String(), "authentication refused")
	require.NotContains(t, b.logs.String(), "s3cret", "no secret, right or wrong, is logged")
}

// Credentials must be whole.
func TestCredentialsValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []Credentials{{User: "alice"}, {Password: "pw"}, {User: "a:b", Password: "pw"}} {
		require.Error(t, c.validate(), "%+v", c)
	}
}

// The signed-in user is who the audit log records, from the browser's
// address; a token used as a bearer is recorded as "token".
func TestActionsAreAuditedAsTheUser(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Credentials: Credentials{Token: "s3cret-token"}})
	form := url.Values{"scope": {"selected"}, "consumer": {"payments"}, "id": {"order-1"}, "confirmed": {"yes"},
		"csrf": {b.console.csrfToken("dana")}, "note": {"INC-7"}}
	r := b.postRequest(t, "/replay", form)
	r.SetBasicAuth("dana", "s3cret-token")
	resp, body := do(t, r)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	record := b.waitAudit(t, "replay")
	require.Equal(t, "dana", record.Actor.Name)
	require.Equal(t, "127.0.0.1", record.Actor.Host, "from the browser's address")
	require.Equal(t, "INC-7", record.Note)
}

// Every action needs the CSRF token of the page it came from, and a
// browser's word that it came from this site: a form on another site can
// make the browser post, with its cookies and basic auth, but can read
// neither the token nor change what the browser says of the origin.
func TestCSRFRefusesForeignPosts(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	valid := b.console.csrfToken(b.console.cfg.Actor)
	for _, tc := range []struct {
		name, csrf string
		header     map[string]string
	}{
		{"no token", "", nil},
		{"forged token", "forged", nil},
		{"another user's token", b.console.csrfToken("mallory"), nil},
		{"cross-site", valid, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"another origin", valid, map[string]string{"Origin": "https://evil.example"}},
	} {
		r := b.postRequest(t, "/replay", url.Values{"scope": {"selected"}, "consumer": {"payments"}, "id": {"order-1"},
			"confirmed": {"yes"}, "csrf": {tc.csrf}})
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		resp, body := do(t, r)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", tc.name, body)
	}
	require.Equal(t, 1, b.count(t, "message_id = 'order-1' AND status = 'dead'"), "nothing was replayed")
	require.Contains(t, b.logs.String(), "action refused")
	resp, _ := doGet(t, b.srv.URL+"/replay")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "an action is never a GET")
}

// A read-only console shows no action and refuses every one, even with a
// valid token.
func TestReadOnlyRefusesActions(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{ReadOnly: true})
	for _, path := range []string{"/replay", "/discard", "/scheduled/cancel", "/outbox/retry"} {
		resp, body := b.post(t, path, url.Values{"scope": {"all"}, "consumer": {"payments"}, "confirmed": {"yes"}, "note": {"x"}, "id": {"1"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
		require.Contains(t, body, "read-only", path)
	}
	require.Equal(t, 4, b.count(t, "status = 'dead'"), "nothing was changed")
	for _, path := range []string{"/failures", "/messages?consumer=payments", "/message?consumer=payments&id=order-1", "/outbox", "/scheduled"} {
		_, body := b.get(t, path)
		require.NotContains(t, body, `method="post"`, "%s offers an action", path)
		require.Contains(t, body, "read-only", path)
	}
}

// Without credentials, actions are taken only at a loopback host name: a
// site whose DNS name is rebound to 127.0.0.1 sends its own name, and is
// refused.
func TestWithoutCredentialsActionsNeedALoopbackHost(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	form := url.Values{"scope": {"selected"}, "consumer": {"payments"}, "id": {"order-1"},
		"csrf": {b.console.csrfToken("console")}}
	r := b.postRequest(t, "/replay", form)
	r.Host = "rebound.evil.example"
	resp, body := do(t, r)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
	require.Contains(t, body, "localhost")

	for host, want := range map[string]bool{"localhost:8080": true, "127.0.0.1": true, "[::1]:80": true, "127.4.5.6:1": true,
		"LOCALHOST": true, "evil.example": false, "10.0.0.1:8080": false, "": false} {
		require.Equal(t, want, loopbackHost(host), host)
	}
}

// serve refuses to offer actions unauthenticated on an address other
// machines can reach.
func TestExposure(t *testing.T) {
	t.Parallel()
	open := Config{}
	for addr, ok := range map[string]bool{"127.0.0.1:8080": true, "localhost:0": true, "[::1]:8080": true,
		":8080": false, "0.0.0.0:8080": false, "10.1.2.3:8080": false, "console.internal:80": false} {
		err := Exposure(addr, open)
		require.Equal(t, ok, err == nil, "%s: %v", addr, err)
	}
	require.NoError(t, Exposure(":8080", Config{ReadOnly: true}))
	require.NoError(t, Exposure(":8080", Config{Credentials: Credentials{Token: "t"}}))
}

// A payload and an error text that hold markup show as text everywhere
// they appear, and the policy forbids scripts besides.
func TestHostileTextRendersAsText(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	for _, path := range []string{"/message?consumer=shipping&id=evil-1", "/messages?consumer=shipping", "/failures"} {
		resp, body := doGet(t, b.srv.URL+path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.NotContains(t, body, "<script>", path)
		require.NotContains(t, body, "<img src=x", path)
		require.Contains(t, body, "&lt;img src=x onerror=alert(&#34;error&#34;)&gt;", path)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	}
	_, body := b.get(t, "/message?consumer=shipping&id=evil-1")
	require.Contains(t, body, "&lt;script&gt;alert(&#34;payload&#34;)&lt;/script&gt;", "the payload shows as text")
}

// doGet fetches url and returns the response and body.
func doGet(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return do(t, r)
}
