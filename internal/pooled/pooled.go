// Package pooled recognises the error pgx meets when a transaction-pooling
// PgBouncer sits between it and PostgreSQL and its query mode prepares
// statements, and names the fix.
//
// pgx's default query mode (cache_statement) prepares a named statement on
// one server connection and runs it, in the next transaction, on another,
// which has no such statement ("prepared statement \"stmtcache_…\" does
// not exist") or already has one of that name ("… already exists");
// describe_exec loses its unnamed statement the same way. The driver's
// words say nothing of the pooler, and the failure comes and goes with the
// pooler's choice of server connection.
package pooled

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// LostStatement reports whether err is a prepared statement lost, or
// found twice, between two server connections.
func LostStatement(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Message, "prepared statement") &&
		(pgErr.Code == "26000" || pgErr.Code == "42P05") // invalid_sql_statement_name, duplicate_prepared_statement
}

// Error is a lost statement (LostStatement), explained: its message names
// the cause and the fix, then Err's in brackets.
type Error struct {
	// Err is the driver's error.
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	return "a prepared statement was lost between two server connections: a pooler in transaction mode " +
		"(PgBouncer) sits between pgx and PostgreSQL, and pgx's query mode prepares statements, which such a pooler " +
		"does not keep. Add default_query_exec_mode=cache_describe to the connection string (after ? or &); " +
		"docs/operations.md, \"Deployment shapes\", says why\n(" + e.Err.Error() + ")"
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Explain returns err unchanged unless LostStatement(err); then it returns
// it as an *Error, which names the cause and the fix. An error explained
// already is returned as it is.
func Explain(err error) error {
	var explained *Error
	if !LostStatement(err) || errors.As(err, &explained) {
		return err
	}
	return &Error{Err: err}
}
