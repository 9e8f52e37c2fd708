package frontier_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/frontier"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// openSince runs OpenSinceSQL as a claim does: first in a transaction,
// of the isolation level given ("" for the session's default).
func openSince(t *testing.T, conn interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, iso pgx.TxIsoLevel) *time.Time {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var since *time.Time
	require.NoError(t, tx.QueryRow(ctx, frontier.OpenSinceSQL).Scan(&since))
	return since
}

// OpenSinceSQL is no later than the start of a transaction open in
// another session, however idle (its rows, once committed, carry that
// start as available_at), and no later than the reader's own. It is NULL
// above READ COMMITTED, while a session does not report its transactions,
// and to a role that cannot see another role's sessions; a time again once
// the role may read all statistics.
func TestOpenSinceIsTheOldestOpenTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, 2)

	open, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = open.Rollback(ctx) }()
	var began time.Time
	require.NoError(t, open.QueryRow(ctx, "SELECT now()").Scan(&began))

	since := openSince(t, pool, "")
	require.NotNil(t, since, "a superuser sees every session")
	require.False(t, since.After(began), "the oldest open transaction (%s) began no later than the one held open (%s)", since, began)
	require.Nil(t, openSince(t, pool, pgx.RepeatableRead), "a snapshot taken before the sessions are read")

	if pgtest.ThroughPooler() {
		return // the sessions below need a direct connection
	}
	direct := func(user, database string) *pgx.Conn {
		cfg, err := pgx.ParseConfig(pgtest.DirectURL(t))
		require.NoError(t, err)
		if user != "" {
			cfg.User = user
		}
		if database != "" {
			cfg.Database = database
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	role := fmt.Sprintf("pgbox_frontier_%d", time.Now().UnixNano())
	_, err = pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := pgtest.Pool(t).Exec(context.Background(), "DROP ROLE "+role)
		require.NoError(t, err)
	})
	conn := direct(role, "")
	require.Nil(t, openSince(t, conn, ""), "another role's transaction, out of sight, may be older than any seen")

	_, err = pool.Exec(ctx, "GRANT pg_read_all_stats TO "+role)
	require.NoError(t, err)
	since = openSince(t, conn, "")
	require.NotNil(t, since, "with pg_read_all_stats every session is seen")
	require.False(t, since.After(began))

	// In a database of its own: while the session is there, every claim
	// in its database keeps the whole margin, other tests' among them.
	database := fmt.Sprintf("pgbox_frontier_%d", time.Now().UnixNano())
	_, err = pool.Exec(ctx, "CREATE DATABASE "+database)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := pgtest.Pool(t).Exec(context.Background(), "DROP DATABASE "+database+" WITH (FORCE)")
		require.NoError(t, err)
	})
	reader := direct("", database)
	require.NotNil(t, openSince(t, reader, ""))
	untracked := direct("", database)
	_, err = untracked.Exec(ctx, "SET track_activities = off")
	require.NoError(t, err)
	require.Nil(t, openSince(t, reader, ""), "a session that does not report its transactions")
}
