package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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

// A database address of neither form is a usage error that shows both
// forms and quotes back nothing but a scheme; a "://" inside key=value
// settings is no scheme.
func TestAMisspeltDSNNamesTheForms(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"postgress://postgres:s3cret@127.0.0.1:5432/pgbox": `--dsn (or DATABASE_URL) is a URL of scheme "postgress", not postgres: use a URL, postgres://USER@HOST:PORT/DATABASE`,
		"127.0.0.1:5432": "--dsn (or DATABASE_URL) is neither a URL nor key=value settings: use a URL, postgres://USER@HOST:PORT/DATABASE, or key=value settings",
		"host=127.0.0.1 password='a://b' sslmode=bogus": "invalid --dsn (or DATABASE_URL)",
	} {
		r := inboxctlEnv(t, nil, "", "stats", "--dsn", dsn)
		require.Equal(t, ExitUsage, r.code, "%s: %s", dsn, r.stderr)
		require.Contains(t, r.stderr, "inboxctl: "+want, dsn)
		require.NotContains(t, r.stderr, "s3cret", dsn)
		require.NotContains(t, r.stderr, "a://b", dsn)
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

// Through a PgBouncer in transaction pooling, pgx's default query mode
// loses its prepared statements between server connections: inboxctl
// says so and names the setting that works, which does.
func TestPooledStatementErrorNamesTheFix(t *testing.T) {
	t.Parallel()
	raw := os.Getenv("PGBOUNCER_URL")
	if raw == "" {
		t.Skip("PGBOUNCER_URL is unset: start a PgBouncer in transaction pooling mode in front of the test database")
	}
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Del("default_query_exec_mode") // pgx's default: cache_statement
	u.RawQuery = q.Encode()
	pooled := u.String()
	schema := fixture(t)
	run := func(dsn string) result {
		return inboxctlEnv(t, map[string]string{"DATABASE_URL": dsn}, "", "failures", "--schema", schema)
	}

	// Each run prepares its statements anew, on whichever server
	// connection PgBouncer gives it: one that already holds them from an
	// earlier run says "already exists", another "does not exist".
	var failed result
	for range 30 {
		if failed = run(pooled); failed.code != ExitOK {
			break
		}
	}
	require.Equal(t, ExitFailure, failed.code, "30 runs through PgBouncer in pgx's default mode, none lost a prepared statement: "+
		"does this PgBouncer keep them (max_prepared_statements)? stdout: %s", failed.stdout)
	require.Regexp(t, `prepared statement "stmtcache_\w+" (does not|already) exists?`, failed.stderr)
	want := "a prepared statement was lost between two server connections: a pooler in transaction mode (PgBouncer)"
	require.Contains(t, failed.stderr, want)
	add := "?default_query_exec_mode=cache_describe"
	if u.RawQuery != "" {
		add = "&default_query_exec_mode=cache_describe"
	}
	require.Contains(t, failed.stderr, "Add "+add+` to --dsn (or DATABASE_URL); docs/operations.md, "Deployment shapes", says why`)

	for range 5 { // the fix works
		run(pooled + add).ok(t)
	}
}

// The advice fits the form of the DSN, and leaves other errors alone.
func TestPooledStatementErrorForms(t *testing.T) {
	t.Parallel()
	lost := &pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_0a1b" does not exist`}
	for dsn, want := range map[string]string{
		"postgres://db/orders":             "Add ?default_query_exec_mode=cache_describe to --dsn",
		"postgres://db/orders?sslmode=off": "Add &default_query_exec_mode=cache_describe to --dsn",
		"host=db dbname=orders":            "Add default_query_exec_mode=cache_describe to --dsn",
	} {
		err := pooledStatementError(dsn, fmt.Errorf("check schema pgbox: %w", lost))
		require.ErrorContains(t, err, want, dsn)
		require.ErrorIs(t, err, lost, "the driver's error is kept")
	}
	other := &pgconn.PgError{Code: "42P01", Message: `relation "pgbox.inbox" does not exist`}
	require.Equal(t, error(other), pooledStatementError("postgres://db/orders", other))
}
