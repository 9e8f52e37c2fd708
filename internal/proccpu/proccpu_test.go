package proccpu_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/internal/proccpu"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A backend's CPU time grows by what a query makes it compute, and counts
// in every PostgreSQL process's; a process that is not PostgreSQL's (this
// test's) is not read.
func TestABackendsCPUTimeGrowsWithItsWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgtest.Pool(t).Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	before, local := proccpu.Postgres(pid)
	if !local {
		t.Skip("PostgreSQL runs on another machine")
	}
	var n int64
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM generate_series(1, 5000000)").Scan(&n))
	after, _ := proccpu.Postgres(pid)
	require.Greater(t, after, before, "five million rows counted in no CPU time")
	require.GreaterOrEqual(t, proccpu.AllPostgres(), after, "every PostgreSQL process's time is less than one's")

	_, ok := proccpu.Postgres(os.Getpid())
	require.False(t, ok, "this test's own process was read as PostgreSQL's")
}
