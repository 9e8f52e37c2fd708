package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/pgtest"
)

// Each way a connection fails, provoked against the real server (or a
// real socket), gets the advice that fits it, and exit code 1.
func TestConnectErrorsGiveAdvicePerCause(t *testing.T) {
	t.Parallel()
	base, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	dsn := func(edit func(u *url.URL)) string {
		u := *base
		q := u.Query()
		q.Set("connect_timeout", "5")
		u.RawQuery = q.Encode()
		edit(&u)
		return u.String()
	}

	// A port where something accepts connections and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		for c := range accepted {
			c.Close()
		}
	})
	// A port where nothing listens: one just closed.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := closed.Addr().(*net.TCPAddr).Port
	require.NoError(t, closed.Close())

	for _, tc := range []struct {
		name, dsn string
		want      []string
	}{
		{"role does not exist", dsn(func(u *url.URL) { u.User = url.User("no_such_role_pgbox") }),
			[]string{`the role "no_such_role_pgbox" does not exist on this server: check the user in --dsn`, `CREATE ROLE "no_such_role_pgbox" LOGIN`}},
		{"database does not exist", dsn(func(u *url.URL) { u.Path = "/no_such_database_pgbox" }),
			[]string{`the database "no_such_database_pgbox" does not exist on this server: check the database name in --dsn`}},
		{"connection refused", dsn(func(u *url.URL) { u.Host = fmt.Sprintf("127.0.0.1:%d", closedPort) }),
			[]string{fmt.Sprintf("connection refused: nothing listens on 127.0.0.1 port %d. Is the server running, on that host and port?", closedPort)}},
		{"timeout", dsn(func(u *url.URL) {
			u.Host = silent.Addr().String()
			q := u.Query()
			q.Set("connect_timeout", "1")
			u.RawQuery = q.Encode()
		}), []string{"no answer within 1s (connect_timeout)"}},
		{"TLS required, server without TLS", dsn(func(u *url.URL) {
			q := u.Query()
			q.Set("sslmode", "require")
			u.RawQuery = q.Encode()
		}), []string{"the server does not accept TLS, which the DSN's sslmode requires"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := inboxctlEnv(t, nil, "", "stats", "--dsn", tc.dsn)
			require.Equal(t, ExitFailure, r.code, r.stderr)
			require.Contains(t, r.stderr, "inboxctl: cannot connect to PostgreSQL at ")
			for _, want := range tc.want {
				require.Contains(t, r.stderr, want)
			}
			require.NotContains(t, r.stderr, "that the server is running", "the generic advice is for causes not told apart")
		})
	}
}

// Interrupting a connection attempt is an interruption, not a connection
// error.
func TestInterruptWhileConnecting(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"stats", "--dsn", pgtest.URL(t)}, nil, &out, &errOut, func(string) string { return "" })
	require.Equal(t, ExitInterrupted, code)
	require.NotContains(t, errOut.String(), "cannot connect")
}
