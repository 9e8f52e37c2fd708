package console

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
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
	for _, path := range actionPaths(b.console) {
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

// Text that holds markup (a payload, metadata, an error text, a stack, an
// operator's note, a filter typed into a form) shows as text everywhere it
// appears, and the policy forbids scripts besides.
func TestHostileTextRendersAsText(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	// A long one too: the failures page cuts it, and shows it whole when
	// opened.
	b.exec(t, `INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		last_error, errors, received_at, available_at, bucket)
		VALUES ('shipping', 'evil-long', 'LabelVoided', 'dead', 1, 1, '\x00', '{}', $1,
		        jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', $1::text)), now(), now(),
		        /* schema */inbox_bucket('evil-long'))`, strings.Repeat(hostileError+"\n", 20))
	form := url.Values{"scope": {"all"}, "consumer": {"shipping"}, "error": {hostileError}, "confirmed": {"yes"}, "note": {hostilePayload}}
	resp, body := b.post(t, "/replay", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	b.waitAudit(t, admin.AuditReplay)
	form.Del("confirmed")
	resp, body = b.post(t, "/replay", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	requireEscaped(t, "the confirmation", body)

	for _, path := range []string{"/message?consumer=shipping&id=evil-1", "/messages?consumer=shipping&status=any&error=" + url.QueryEscape(hostileError),
		"/failures", "/audit", "/jobs/1", "/message?consumer=shipping&id=evil-long"} {
		resp, body := doGet(t, b.srv.URL+path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		requireEscaped(t, path, body)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	}
	_, body = b.get(t, "/failures?consumer=shipping")
	require.Contains(t, body, `<details class="whole"><summary title="open: the whole pattern">&lt;img src=x`, "the long one, cut")
	require.Contains(t, body, "<pre>&lt;img src=x onerror=alert(", "and whole")
	_, body = b.get(t, "/message?consumer=shipping&id=evil-1")
	require.Contains(t, body, "<pre class=\"payload\">&lt;script&gt;alert(&#34;payload&#34;)&lt;/script&gt;</pre>", "the payload shows as text")
	require.Contains(t, body, "<tr><th>&lt;script&gt;alert(&#34;payload&#34;)&lt;/script&gt;</th><td>&lt;img src=x", "so does the metadata")
	require.Contains(t, body, "<strong>replayed</strong> by an operator (replay 1; was dead after 1 attempts): &lt;script&gt;", "and the note")
}

// requireEscaped checks that body holds hostilePayload and hostileError as
// text only.
func requireEscaped(t *testing.T, what, body string) {
	t.Helper()
	require.NotContains(t, body, "<script>", what)
	require.NotContains(t, body, "<img src=x", what)
	require.Regexp(t, `&lt;(script|img src=x)`, body, "%s shows the hostile text, escaped", what)
}

// doGet fetches url and returns the response and body.
func doGet(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return do(t, r)
}

// requestOf is a request for route rt's pattern, with a path it matches.
func requestOf(t *testing.T, base string, rt route) *http.Request {
	t.Helper()
	method, path, _ := strings.Cut(rt.pattern, " ")
	path = strings.NewReplacer("{$}", "", "{id}", "1").Replace(path)
	r, err := http.NewRequest(method, base+path, strings.NewReader(url.Values{"scope": {"all"}, "confirmed": {"yes"}}.Encode()))
	require.NoError(t, err)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

// actionPaths are the paths of every action the console routes.
func actionPaths(c *Console) []string {
	var out []string
	for _, rt := range c.routes() {
		if rt.action {
			_, path, _ := strings.Cut(rt.pattern, " ")
			out = append(out, path)
		}
	}
	return out
}

// Every route the console has, pages and actions alike (a route added
// later too), needs credentials when it has them, and every action needs
// the CSRF token besides; every response, refusals and the mux's own 404
// and 405 included, carries the security headers.
func TestEveryRouteIsGuarded(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Credentials: Credentials{Token: "s3cret-token"}})
	routes := b.console.routes()
	require.Len(t, actionPaths(b.console), 8, "replay, discard, cancel, retry, pause, resume, edit, release")
	for _, rt := range routes {
		resp, _ := do(t, requestOf(t, b.srv.URL, rt))
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s without credentials", rt.pattern)
		requireSecurityHeaders(t, resp, rt.pattern)
		if rt.action {
			r := requestOf(t, b.srv.URL, rt)
			r.Header.Set("Authorization", "Bearer s3cret-token")
			resp, body := do(t, r)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s without a CSRF token: %s", rt.pattern, body)
			requireSecurityHeaders(t, resp, rt.pattern)
		}
	}
	require.Equal(t, 4, b.count(t, "status = 'dead'"), "nothing was changed")
	for path, status := range map[string]int{"/nowhere": http.StatusNotFound, "/replay": http.StatusMethodNotAllowed} {
		resp, _ := doGet(t, b.srv.URL+path)
		require.Equal(t, status, resp.StatusCode, path)
		requireSecurityHeaders(t, resp, path)
	}
}

// requireSecurityHeaders checks that resp forbids scripts, framing and
// sniffing, and caching.
func requireSecurityHeaders(t *testing.T, resp *http.Response, what string) {
	t.Helper()
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'", what)
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), what)
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), what)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), what)
}

// An error text is redacted before a page or the log shows it: a
// connection string's password never reaches either.
func TestErrorPagesRedactSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Redact: func(s string) string { return redactPassword.Replace(s) }})
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	b.console.fail(w, r, &b.console.cfg.Targets[0], errors.New("connect postgres://ops:hunter2@db/orders: refused"))
	require.Equal(t, http.StatusInternalServerError, w.Code)
	require.Contains(t, w.Body.String(), "postgres://ops:xxxxx@db/orders")
	require.NotContains(t, w.Body.String(), "hunter2")
	require.Contains(t, b.logs.String(), "request failed")
	require.NotContains(t, b.logs.String(), "hunter2")
}

// Without credentials, every page (not only the actions) answers only at
// localhost or an IP address: a page of another site whose DNS name is
// rebound to the console's address sends its own name as the Host, and
// reads nothing, neither a message's payload nor the stylesheet. With
// credentials, the browser sends them to the console's origin only, so
// any Host is served.
func TestWithoutCredentialsPagesNeedATrustedHost(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{ReadOnly: true})
	get := func(b *testBundle, path, host string, set func(*http.Request)) (int, string) {
		r, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
		require.NoError(t, err)
		r.Host = host
		if set != nil {
			set(r)
		}
		resp, body := do(t, r)
		return resp.StatusCode, body
	}
	_, port, err := net.SplitHostPort(strings.TrimPrefix(b.srv.URL, "http://"))
	require.NoError(t, err)
	for _, path := range []string{"/message?consumer=shipping&id=evil-1", "/", "/failures", "/assets/console.css", "/nowhere"} {
		status, body := get(b, path, "rebound.evil.example:"+port, nil)
		require.Equal(t, http.StatusForbidden, status, "%s: %s", path, body)
		require.NotContains(t, body, "script", path)
		require.Contains(t, body, "http://127.0.0.1:"+port+"/", "%s says where to open it", path)
		require.Contains(t, b.logs.String(), "host refused")
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "10.1.2.3:" + port} {
		status, body := get(b, "/message?consumer=shipping&id=evil-1", host, nil)
		require.Equal(t, http.StatusOK, status, "%s: %s", host, body)
		require.Contains(t, body, "&lt;script&gt;", host)
	}

	withToken := setup(t, Config{Credentials: Credentials{Token: "s3cret-token"}})
	status, body := get(withToken, "/message?consumer=shipping&id=evil-1", "console.internal.example",
		func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token") })
	require.Equal(t, http.StatusOK, status, body)
}
