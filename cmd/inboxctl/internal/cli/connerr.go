package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/internal/pooled"
)

// connectError explains why inboxctl could not connect, with the advice
// that fits the cause: the server refused the role, the password or the
// database; nothing listens there; no answer came in time; TLS failed.
// The driver's own error follows, for the details.
func connectError(cfg *pgxpool.Config, err error) error {
	return fmt.Errorf("cannot connect to PostgreSQL at %s: %s\n(%w)", where(cfg), connectAdvice(cfg, err), err)
}

// connectAdvice says what most likely went wrong and what to do.
func connectAdvice(cfg *pgxpool.Config, err error) string {
	c := cfg.ConnConfig
	var (
		pgErr   *pgconn.PgError
		dnsErr  *net.DNSError
		certErr *tls.CertificateVerificationError
		hostErr x509.HostnameError
		authErr x509.UnknownAuthorityError
	)
	switch {
	case errors.As(err, &pgErr):
		return serverRefusal(c.User, c.Database, pgErr)
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("the host name %q does not resolve: check the host in --dsn (or DATABASE_URL)", dnsErr.Name)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("connection refused: nothing listens on %s port %d. Is the server running, on that host and port?", c.Host, c.Port)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Sprintf("no route to %s: check the host in --dsn (or DATABASE_URL) and the network (VPN, firewall)", c.Host)
	case pgconn.Timeout(err), errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within %s (connect_timeout): the server may be down or overloaded, or a firewall drops "+
			"the packets. Check the host and port, or raise connect_timeout in the DSN", c.ConnectTimeout)
	case errors.As(err, &certErr), errors.As(err, &hostErr), errors.As(err, &authErr):
		return "the server's TLS certificate was not accepted: point sslrootcert at the CA that signed it, and with " +
			"sslmode=verify-full connect by the host name the certificate names"
	case strings.Contains(err.Error(), "server refused TLS connection") && len(c.Fallbacks) == 0:
		// With fallbacks (sslmode=prefer, allow) a refusal of TLS is not
		// what failed: the plain attempt after it is.
		return "the server does not accept TLS, which the DSN's sslmode requires: enable ssl on the server, or " +
			"(on a network you trust) use sslmode=prefer or disable"
	case strings.Contains(err.Error(), "tls:"):
		return "the TLS handshake failed: check sslmode, sslcert, sslkey and sslrootcert in the DSN"
	}
	return "check --dsn (or DATABASE_URL), and that the server is running"
}

// serverRefusal explains an error the server sent while connecting.
func serverRefusal(user, database string, e *pgconn.PgError) string {
	switch {
	case e.Code == "28000" && strings.Contains(e.Message, "role") && strings.Contains(e.Message, "does not exist"):
		return fmt.Sprintf("the role %q does not exist on this server: check the user in --dsn (or DATABASE_URL), "+
			"or have it created (CREATE ROLE %q LOGIN, then grant it pgbox's schema)", user, user)
	case e.Code == "28000":
		return fmt.Sprintf("the server's pg_hba.conf admits no connection like this one (%s): check the user, database "+
			"and sslmode in --dsn, or ask for an entry in pg_hba.conf", e.Message)
	case e.Code == "28P01":
		return fmt.Sprintf("password authentication failed for the role %q: check the password in --dsn "+
			"(or DATABASE_URL, PGPASSWORD, ~/.pgpass)", user)
	case e.Code == "3D000":
		return fmt.Sprintf("the database %q does not exist on this server: check the database name in --dsn "+
			"(or DATABASE_URL), or create it (CREATE DATABASE %q)", database, database)
	case e.Code == "53300":
		return "the server has no connection slot free (max_connections): try again, or close idle connections"
	case e.Code == "57P03":
		return "the server is starting up, shutting down or in recovery: try again shortly"
	}
	return fmt.Sprintf("the server refused the connection (%s)", e.Message)
}

// pooledStatementError explains err when it is what pgx's statement cache
// meets behind a pooler in transaction mode (PgBouncer): pgx's default
// query mode (cache_statement) prepares a named statement on one server
// connection and runs it, in the next transaction, on another, which has
// no such statement ("prepared statement \"stmtcache_…\" does not exist"),
// or already has one of that name ("… already exists"); describe_exec
// loses its unnamed statement the same way. It names the fix, in the form
// dsn takes (URL or key=value), and keeps the driver's error in brackets;
// any other error is returned as it is.
func pooledStatementError(dsn string, err error) error {
	if !pooled.LostStatement(err) {
		return err
	}
	// Told in inboxctl's words, once: the library's explanation, for a
	// service's logs, gives way to advice on --dsn.
	if explained := (*pooled.Error)(nil); errors.As(err, &explained) {
		err = explained.Err
	}
	add := "?default_query_exec_mode=cache_describe"
	switch {
	case !strings.Contains(dsn, "://"):
		add = " default_query_exec_mode=cache_describe"
	case strings.Contains(dsn, "?"):
		add = "&default_query_exec_mode=cache_describe"
	}
	return fmt.Errorf("a prepared statement was lost between two server connections: a pooler in transaction mode "+
		"(PgBouncer) sits between inboxctl and PostgreSQL, and pgx's default query mode prepares statements, which such "+
		"a pooler does not keep. Add %s to --dsn (or DATABASE_URL); docs/operations.md, \"Deployment shapes\", says why\n(%w)",
		strings.TrimSpace(add), err)
}
