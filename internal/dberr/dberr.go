// Package dberr recognises the errors a database outage causes, as
// opposed to the errors a statement or a request causes: a failover or
// switchover, a restart or a crash of the server.
//
// Such an outage is nobody's fault among pgbox's users: the idempotency
// middleware retries a request's own statements through it instead of
// answering 503, and the dispatcher gives back the attempt it cut instead
// of charging the message for it.
package dberr

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Cut reports whether err says the database went away or is not (yet) the
// writable primary, rather than that a statement failed:
//
//   - the server ended the session: terminating connection because of an
//     administrator command, a crash of another backend, or a shutdown
//     (57P01, 57P02); or it is starting up, shutting down or in recovery
//     and accepts no connection (57P03);
//   - the server is a standby now: cannot execute a write in a read-only
//     transaction (25006), as a demoted primary answers;
//   - a connection exception (class 08) the server reports;
//   - the connection broke: refused, reset, closed, or ended in the middle
//     of a message; or pgx knows the statement was never sent
//     (pgconn.SafeToRetry), such as on a connection already closed;
//   - no connection could be made, target_session_attrs=read-write
//     finding no writable host among those of the URL included, unless the
//     server refused it for a reason an outage does not explain (a wrong
//     password, role or database).
//
// A deadline or a cancellation is not a cut: it is the caller's own limit,
// and a statement that runs too long must keep failing as it does.
func Cut(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "25006": // admin_shutdown, crash_shutdown, cannot_connect_now, read_only_sql_transaction
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08" // connection_exception
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true // no server answered with an error (a PgError would have been found above)
	}
	var netErr net.Error
	switch {
	case pgconn.SafeToRetry(err),
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &netErr) && netErr.Timeout():
		return true // a network timeout (keepalives), not a context's
	}
	return false
}
