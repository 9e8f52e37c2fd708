package dberr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/dberr"
)

func TestCutTellsAnOutageFromAStatementsFailure(t *testing.T) {
	t.Parallel()
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, err := range []error{
		&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgconn.PgError{Code: "57P02"},
		&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"},
		&pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"},
		&pgconn.PgError{Code: "08006"},
		fmt.Errorf("claim: %w", pgconn.ErrConnClosed),
		fmt.Errorf("receive: %w", io.ErrUnexpectedEOF),
		reset,
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
	} {
		require.True(t, dberr.Cut(err), "%v", err)
	}
	for _, err := range []error{
		nil,
		errors.New("payment declined"),
		&pgconn.PgError{Code: "23505", Message: "duplicate key value violates unique constraint"},
		&pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"},
		&pgconn.PgError{Code: "28P01", Message: "password authentication failed"},
		context.DeadlineExceeded,
		fmt.Errorf("handler: %w: %w", context.DeadlineExceeded, reset),
	} {
		require.False(t, dberr.Cut(err), "%v", err)
	}
}
