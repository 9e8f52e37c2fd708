package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/pgtest"
)

// served is an inboxctl serve running in the test, until the test ends.
type served struct {
	base           string // http://127.0.0.1:port
	stdout, stderr *lockedBuffer
}

// consoleLine is serve's first line, which names its address.
var consoleLine = regexp.MustCompile(`inboxctl console on (http://\S+)/ `)

// serve runs inboxctl serve with args and env until the test ends, and
// waits for it to listen.
func serve(t *testing.T, env map[string]string, args ...string) *served {
	t.Helper()
	s := &served{stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), strings.NewReader(""), s.stdout, s.stderr,
			func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, ExitInterrupted, <-done, "serve ends with Ctrl-C's exit status: %s", s.stderr)
	})
	require.Eventually(t, func() bool {
		m := consoleLine.FindStringSubmatch(s.stdout.String())
		if m != nil {
			s.base = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "serve did not start: %s", s.stderr)
	return s
}

// get fetches path from the console.
func (s *served) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(s.base + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// lockedBuffer is a bytes.Buffer that serve and the test share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// withPassword returns the test database's URL with a password in it:
// the test server trusts local connections, so it is never checked, and a
// leak of it can be looked for.
func withPassword(t *testing.T, password string) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

// serve refuses to offer actions without credentials on an address other
// machines reach, and says what to do; read-only, or with a token, it
// starts.
func TestServeRefusesOpenActionsOffLoopback(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	env := map[string]string{"DATABASE_URL": pgtest.URL(t)}
	r := inboxctlEnv(t, env, "", "serve", "--addr", "0.0.0.0:0", "--schema", schema)
	require.Equal(t, ExitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "without credentials")
	require.Contains(t, r.stderr, "--read-only")

	s := serve(t, env, "--schema", schema, "--read-only")
	require.Contains(t, s.stdout.String(), "read-only")
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600))
	s = serve(t, env, "--schema", schema, "--token-file", tokenFile)
	status, _ := s.get(t, "/")
	require.Equal(t, http.StatusUnauthorized, status)

	r = inboxctlEnv(t, env, "", "serve", "--token", "a", "--token-file", tokenFile)
	require.Equal(t, ExitUsage, r.code)
	require.Contains(t, r.stderr, "not both")
	r = inboxctlEnv(t, env, "", "serve", "--basic-auth", "nopassword")
	require.Equal(t, ExitUsage, r.code)
	require.Contains(t, r.stderr, "user:password")
	r = inboxctlEnv(t, env, "", "serve", "--target", "schema=x")
	require.Equal(t, ExitUsage, r.code)
	require.Contains(t, r.stderr, "no name=")
	r = inboxctlEnv(t, env, "", "serve", "--target", "name=x,dsn=postgres://a:b@c/d")
	require.Equal(t, ExitUsage, r.code)
	require.Contains(t, r.stderr, "a DSN never goes on the command line")
}

// One console shows several schemas, on one database or several, with a
// switcher; a target's DSN comes from the environment or a file.
func TestServeSwitchesTargets(t *testing.T) {
	t.Parallel()
	payments, billing := fixture(t), pgtest.Schema(t)
	dsnFile := filepath.Join(t.TempDir(), "dsn")
	require.NoError(t, os.WriteFile(dsnFile, []byte(pgtest.URL(t)+"\n"), 0o600))
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "BILLING_URL": pgtest.URL(t)}
	s := serve(t, env, "--schema", payments, "--target", "name=billing,schema="+billing+",dsn-env=BILLING_URL",
		"--target", "name=again,dsn-file="+dsnFile+",schema="+payments)
	require.Contains(t, s.stdout.String(), "3 targets")
	status, body := s.get(t, "/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<option value="billing">billing</option>`)
	require.Contains(t, body, "3 dead messages", "the first target is the --schema one")
	status, body = s.get(t, "/?db=billing")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "No messages in this schema yet")
	status, body = s.get(t, "/failures?db=again")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "payment gateway timeout")

	r := inboxctlEnv(t, env, "", "serve", "--target", "name=x,dsn-env=NOT_SET")
	require.Equal(t, ExitUsage, r.code)
	require.Contains(t, r.stderr, "$NOT_SET is empty or unset")
}

// What serve prints and logs, while pages with payloads are read, an
// action is refused and a target's schema is missing, holds no payload
// byte and no password of the DSN.
func TestServeLogsNoPayloadNorPassword(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	const password = "pw-Zq8x!leak"
	env := map[string]string{"DATABASE_URL": withPassword(t, password)}
	s := serve(t, env, "--schema", schema, "--target", "name=missing,schema=no_such_schema")
	for _, path := range []string{"/", "/messages?consumer=payments", "/message?consumer=payments&id=order-2%2Fplaced",
		"/message?consumer=payments&id=bad-1", "/outbox/row?id=019a0000-0000-7000-8000-000000000002", "/?db=missing", "/failures?db=missing"} {
		status, body := s.get(t, path)
		require.NotContains(t, body, password, path)
		if !strings.Contains(path, "missing") {
			require.Equal(t, http.StatusOK, status, path)
		}
	}
	status, body := s.get(t, "/?db=missing")
	require.Equal(t, http.StatusInternalServerError, status)
	require.Contains(t, body, "not migrated")
	resp, err := http.PostForm(s.base+"/replay", url.Values{"scope": {"all"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	logs := s.stdout.String() + s.stderr.String()
	require.Contains(t, logs, "request failed", "the missing schema is logged")
	require.Contains(t, logs, "action refused")
	for _, leak := range []string{password, url.QueryEscape(password), `"cents":999`, "legacy-importer", "traceparent", "deadbeef"} {
		require.NotContains(t, logs, leak)
	}
}
