package notify

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// SendSQL sends notification $2 on channel $1 in a statement of its own
// whose transaction commits asynchronously (synchronous_commit off for it
// alone).
//
// Why: PostgreSQL serializes notifying transactions. Each takes a lock for
// the whole database at its commit (AccessExclusiveLock on object 0 of
// pg_database) and holds it until the commit has been flushed to the WAL,
// so notifying transactions commit one at a time, one WAL flush each,
// while other commits share flushes. Under load that lock becomes a queue
// that every notifying business transaction waits in: at 1,000 messages a
// second end to end on 2 cores, commits that carried a NOTIFY took 60-90
// ms (p50) against 10-15 ms for the rest. A notification sent on its own
// has nothing to make durable: asynchronously committed, it holds the lock
// only while its entry is queued, not through a flush. If the server
// crashes before the WAL writer flushes it, the notification is lost, which
// a hint may be: the receivers poll, and their listeners look for work
// after reconnecting.
const SendSQL = `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)`

// Execer is what Send needs: a pool or a connection, outside any
// transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Send sends a notification on its own, outside any transaction of the
// caller's (see SendSQL). Use it for notifications a Limiter owes: inside a
// business transaction, pg_notify is delivered only at its commit, which
// must stay synchronous.
func Send(ctx context.Context, db Execer, channel, payload string) error {
	_, err := db.Exec(ctx, SendSQL, channel, payload)
	return err
}
