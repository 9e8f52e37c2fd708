package dispatcher

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errAbortedByHandler fails a handler that returned nil from a transaction
// one of its own statements had aborted: its writes cannot commit.
var errAbortedByHandler = errors.New("the handler returned nil, but one of its statements failed and aborted the transaction: return the statement's error instead of ignoring it")

// handlerTx is the transaction an InTx handler gets: the batch transaction
// behind a savepoint of the handler's own, so that a failing handler's
// writes are undone without touching its neighbours'. It offers everything
// but committing and rolling back, which belong to the dispatcher.
//
// The savepoint is taken lazily, just before the handler's first use of the
// transaction, and never released: a handler that touches no table costs no
// round trip, one that does costs one (SAVEPOINT), and a failed one another
// (ROLLBACK TO SAVEPOINT). An unreleased savepoint is harmless: the batch's
// COMMIT commits every savepoint's writes with it, and releasing would not
// free PostgreSQL's subtransaction slots before then either.
type handlerTx struct {
	ctx   context.Context // the handler's, for uses that take no context
	outer pgx.Tx
	sp    pgx.Tx
	err   error // taking the savepoint failed: the transaction is unusable
}

// savepoint returns the handler's savepoint, taking it on first use.
func (t *handlerTx) savepoint(ctx context.Context) (pgx.Tx, error) {
	if t.sp == nil && t.err == nil {
		t.sp, t.err = t.outer.Begin(ctx)
	}
	return t.sp, t.err
}

// finish settles the savepoint after the handler returned handlerErr. It
// returns the error the attempt failed with (nil for success), and broken
// when the batch transaction can no longer be used.
func (t *handlerTx) finish(ctx context.Context, handlerErr error) (failure, broken error) {
	if t.err != nil {
		return t.err, t.err
	}
	if t.sp == nil {
		// The handler never used the transaction: nothing to undo.
		return handlerErr, nil
	}
	if handlerErr == nil && t.outer.Conn().PgConn().TxStatus() != 'E' {
		return nil, nil
	}
	if handlerErr == nil {
		handlerErr = errAbortedByHandler
	}
	if err := t.sp.Rollback(ctx); err != nil {
		return handlerErr, err
	}
	return handlerErr, nil
}

// Begin starts a savepoint nested in the handler's.
func (t *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	sp, err := t.savepoint(ctx)
	if err != nil {
		return nil, err
	}
	return sp.Begin(ctx)
}

// Commit refuses: the dispatcher commits the handler's writes together
// with the done mark.
func (*handlerTx) Commit(context.Context) error {
	return errors.New("dispatcher: an InTx handler must not commit its transaction: return nil, and the dispatcher commits it together with the done mark")
}

// Rollback refuses: a handler undoes its writes by returning an error.
func (*handlerTx) Rollback(context.Context) error {
	return errors.New("dispatcher: an InTx handler must not roll back its transaction: return an error, and the dispatcher rolls back its writes")
}

// CopyFrom runs COPY FROM in the handler's savepoint.
func (t *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	sp, err := t.savepoint(ctx)
	if err != nil {
		return 0, err
	}
	return sp.CopyFrom(ctx, table, columns, src)
}

// SendBatch sends a batch in the handler's savepoint.
func (t *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	sp, err := t.savepoint(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return sp.SendBatch(ctx, b)
}

// LargeObjects returns the large objects of the handler's savepoint.
func (t *handlerTx) LargeObjects() pgx.LargeObjects {
	if sp, err := t.savepoint(t.ctx); err == nil {
		return sp.LargeObjects()
	}
	return t.outer.LargeObjects() // finish reports the failed savepoint
}

// Prepare prepares a statement on the transaction's connection.
func (t *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	sp, err := t.savepoint(ctx)
	if err != nil {
		return nil, err
	}
	return sp.Prepare(ctx, name, sql)
}

// Exec runs a statement in the handler's savepoint.
func (t *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	sp, err := t.savepoint(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return sp.Exec(ctx, sql, args...)
}

// Query runs a query in the handler's savepoint.
func (t *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	sp, err := t.savepoint(ctx)
	if err != nil {
		return nil, err
	}
	return sp.Query(ctx, sql, args...)
}

// QueryRow runs a query returning one row in the handler's savepoint.
func (t *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	sp, err := t.savepoint(ctx)
	if err != nil {
		return errRow{err}
	}
	return sp.QueryRow(ctx, sql, args...)
}

// Conn returns the transaction's connection, with the handler's savepoint
// taken first, since what the handler does on it is part of its attempt.
func (t *handlerTx) Conn() *pgx.Conn {
	_, _ = t.savepoint(t.ctx) // finish reports a failed savepoint
	return t.outer.Conn()
}

// errRow is a pgx.Row whose query could not be sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
