package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// unreachableRetry is how often, in seconds, a page that could not reach
// its database tries again (its refresh, and its Retry-After).
const unreachableRetry = 5

// outage is what the error page says when a target's database cannot be
// reached, or the connection to it was lost: what is wrong, in words, and
// what to check. The driver's own error goes under it, for the details.
type outage struct {
	// Check lists what to look at, most likely first.
	Check []string
	// What says what is wrong: "Cannot connect to PostgreSQL at db port
	// 5432: the connection was refused (nothing listens there)."
	What string
}

// lostCodes are the SQLSTATEs the server sends as it ends a session that
// was working: an administrator or a crash shut it down, it cannot take
// connections now (starting, stopping, recovering), or the connection
// broke (class 08).
var lostCodes = map[string]bool{"57P01": true, "57P02": true, "57P03": true, "08000": true, "08003": true, "08006": true}

// unreachable explains err when it says that the database could not be
// reached (connecting failed) or the connection was lost under a
// statement; nil for any other error (a query the database refused, a
// schema that is not migrated), which the page shows as it is.
func unreachable(err error) *outage {
	var (
		connErr *pgconn.ConnectError
		pgErr   *pgconn.PgError
		opErr   *net.OpError
	)
	if errors.As(err, &connErr) {
		return connectOutage(connErr)
	}
	switch {
	case errors.As(err, &pgErr) && lostCodes[pgErr.Code],
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed),
		errors.As(err, &opErr):
		return &outage{
			What: "The connection to PostgreSQL was lost while the page was being read: the server shut down or restarted " +
				"(a failover, say), or the network dropped the connection.",
			Check: []string{
				"Is PostgreSQL up? A restart or a failover ends every connection; the console connects again by itself.",
				"Is the network between this machine and the server up (VPN, firewall, a proxy or pooler in between)?",
			},
		}
	}
	return nil
}

// connectOutage explains a failed connection by its cause, as inboxctl's
// connection errors do.
func connectOutage(e *pgconn.ConnectError) *outage {
	at, ready := "PostgreSQL", "pg_isready"
	if c := e.Config; c != nil {
		at = fmt.Sprintf("PostgreSQL at %s port %d", c.Host, c.Port)
		ready = fmt.Sprintf("pg_isready -h %s -p %d", c.Host, c.Port)
	}
	o := &outage{Check: []string{
		"Is PostgreSQL running, on that host and port? (" + ready + " answers from this machine.)",
		"Can this machine reach it: the host name, a VPN, a firewall, a proxy or pooler in between?",
		"Was the database just restarted or failed over? Then this page shows what you asked for once it answers.",
	}}
	var (
		pgErr  *pgconn.PgError
		dnsErr *net.DNSError
	)
	switch {
	case errors.Is(e, syscall.ECONNREFUSED):
		o.What = fmt.Sprintf("Cannot connect to %s: the connection was refused (nothing listens there).", at)
	case errors.As(e, &dnsErr):
		o.What = fmt.Sprintf("Cannot connect to %s: the host name %q does not resolve.", at, dnsErr.Name)
		o.Check = o.Check[1:]
	case errors.Is(e, syscall.EHOSTUNREACH), errors.Is(e, syscall.ENETUNREACH):
		o.What = fmt.Sprintf("Cannot connect to %s: there is no route to the host.", at)
		o.Check = o.Check[1:]
	case pgconn.Timeout(e), errors.Is(e, context.DeadlineExceeded):
		o.What = fmt.Sprintf("Cannot connect to %s: no answer in time. The server may be down or overloaded, or a firewall drops the packets.", at)
	case errors.As(e, &pgErr) && pgErr.Code == "57P03":
		o.What = fmt.Sprintf("Cannot connect to %s: the server is starting up, shutting down or recovering.", at)
		o.Check = []string{"Wait: this page tries again by itself. If it lasts, look at the server's log."}
	case errors.As(e, &pgErr) && pgErr.Code == "53300":
		o.What = fmt.Sprintf("Cannot connect to %s: it has no connection slot free (max_connections).", at)
		o.Check = []string{"Wait, or close idle connections (pg_stat_activity shows who holds them)."}
	case errors.As(e, &pgErr):
		o.What = fmt.Sprintf("Cannot connect to %s: the server refused the connection (%s).", at, pgErr.Message)
		o.Check = []string{"Check the user, password and database of this target's connection string, and pg_hba.conf on the server."}
	default:
		o.What = fmt.Sprintf("Cannot connect to %s.", at)
	}
	return o
}
