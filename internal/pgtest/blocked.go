package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// WaitBlockedBy waits until some statement waits for a lock that holder,
// an open transaction, holds: the moment a test that holds a row, to make
// a statement stop inside it, may go on. It asks pg_blocking_pids, not
// whether a statement waits for some lock: under a loaded server a
// statement also waits, for a moment, on locks nobody in the test holds
// (a catalog autovacuum is truncating), and a test that took that for its
// own would go on too early. It fails the test when ended (nil: never) is
// closed first, or after a minute.
func WaitBlockedBy(tb testing.TB, holder pgx.Tx, ended <-chan struct{}) {
	tb.Helper()
	ctx := context.Background()
	// The backend's own pid, asked inside the transaction: through
	// PgBouncer the connection's key data names PgBouncer, not the server.
	var pid int32
	require.NoError(tb, holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for {
		var blocked bool
		// pg_blocking_pids takes the lock manager whole for a moment: it
		// is asked only about backends that wait for a lock (CASE keeps
		// it behind that test).
		require.NoError(tb, Pool(tb).QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			               WHERE CASE WHEN wait_event_type = 'Lock' THEN $1::int = ANY (pg_blocking_pids(pid)) END)`, pid).Scan(&blocked))
		if blocked {
			return
		}
		select {
		case <-tick.C:
		case <-ended:
			tb.Fatal("ended before any statement waited for the held lock")
		case <-deadline:
			tb.Fatal("no statement waited for the held lock in a minute")
		}
	}
}
