package pooled_test

import (
	"context"
	"net/url"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A service whose pool reaches PostgreSQL through a transaction-pooling
// PgBouncer in pgx's default query mode loses prepared statements between
// server connections. What it is told at start (the schema check every
// dispatcher, relay and maintainer makes) and on a receive names the fix,
// not only pgx's "prepared statement \"stmtcache_…\" does not exist".
func TestAServiceBehindAPoolerIsToldTheFix(t *testing.T) {
	t.Parallel()
	raw := os.Getenv("PGBOUNCER_URL")
	if raw == "" {
		t.Skip("PGBOUNCER_URL is unset: start a PgBouncer in transaction pooling mode in front of the test database")
	}
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set("default_query_exec_mode", "cache_statement") // pgx's default
	u.RawQuery = q.Encode()
	schema := pgtest.Schema(t)
	ctx := context.Background()

	// Each pool prepares its statements anew, on whichever server
	// connection PgBouncer gives it: one that already holds them from an
	// earlier pool says "already exists", another "does not exist".
	for _, try := range map[string]func(*pgxpool.Pool) error{
		"schema check": func(pool *pgxpool.Pool) error { return pgbox.CheckSchema(ctx, pool, schema) },
		"receive": func(pool *pgxpool.Pool) error {
			in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema})
			require.NoError(t, err)
			_, err = in.Receive(ctx, inbox.Message{ID: uuid.Must(uuid.NewV7()).String(), EventType: "E", Payload: []byte("{}")})
			return err
		},
	} {
		var failed error
		for range 30 {
			pool, err := pgxpool.New(ctx, u.String())
			require.NoError(t, err)
			failed = try(pool)
			pool.Close()
			if failed != nil {
				break
			}
		}
		require.Error(t, failed, "30 pools through PgBouncer in pgx's default mode, none lost a prepared statement: does this PgBouncer keep them (max_prepared_statements)?")
		require.ErrorContains(t, failed, "a pooler in transaction mode (PgBouncer)")
		require.ErrorContains(t, failed, "default_query_exec_mode=cache_describe")
		require.Regexp(t, `prepared statement "stmtcache_\w+" (does not|already) exists?`, failed.Error())
	}
}
