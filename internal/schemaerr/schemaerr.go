// Package schemaerr turns the SQL errors that a missing or outdated pgbox
// schema causes into the clear error pgbox.CheckSchema gives.
//
// The packages that query pgbox's tables do not check the schema version
// before every call (that would cost a round trip each time). Instead, when a
// statement fails because a table, column or function does not exist, they
// pass the error through Explain, which asks the database once what is wrong.
package schemaerr

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/pooled"
)

// checkTimeout bounds the schema check Explain runs.
const checkTimeout = 5 * time.Second

// Explain returns err unchanged unless it is one of the errors an
// unmigrated or outdated schema produces; then it returns CheckSchema's
// verdict, which names the schema, its version and the command to run. A
// prepared statement lost behind a transaction pooler is explained too
// (pooled.Explain).
// db must not be the transaction the failed statement ran in: that
// transaction is aborted and can run nothing more.
func Explain(ctx context.Context, db pgbox.Querier, schema string, err error) error {
	if pooled.LostStatement(err) {
		return pooled.Explain(err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "42P01", "3F000", "42703", "42883": // undefined_table, invalid_schema_name, undefined_column, undefined_function
	default:
		return err
	}
	// The caller's context may already be done (or about to be); the check
	// gets its own short deadline so that it can neither be cancelled
	// half-way nor wait for ever for a pool connection.
	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkTimeout)
	defer cancel()
	if checkErr := pgbox.CheckSchema(checkCtx, db, schema); checkErr != nil && !errors.Is(checkErr, context.DeadlineExceeded) {
		return checkErr
	}
	return err
}
