package pooled_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/pooled"
)

func TestExplainNamesTheFixForALostStatementOnly(t *testing.T) {
	for _, lost := range []*pgconn.PgError{
		{Code: "26000", Message: `prepared statement "stmtcache_0a1b" does not exist`},
		{Code: "42P05", Message: `prepared statement "stmtcache_0a1b" already exists`},
	} {
		err := pooled.Explain(fmt.Errorf("claim: %w", lost))
		require.True(t, pooled.LostStatement(err))
		require.ErrorContains(t, err, "default_query_exec_mode=cache_describe")
		require.ErrorContains(t, err, lost.Message, "the driver's words are kept")
		require.ErrorIs(t, err, lost)
		require.Same(t, err, pooled.Explain(err), "explained once")
	}
	for _, other := range []error{
		&pgconn.PgError{Code: "42P01", Message: `relation "inbox" does not exist`},
		&pgconn.PgError{Code: "26000", Message: `portal "p" does not exist`},
		errors.New("prepared statement lost"),
	} {
		require.False(t, pooled.LostStatement(other))
		require.Same(t, other, pooled.Explain(other))
	}
}
