package console

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
)

// The overview names the maintenance leader as inboxctl processes does:
// by the process name the service gave it, its host and pid, not River's
// client id.
func TestOverviewNamesTheLeaderAsTheCLIDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{})
	m, err := maintenance.New(pgtest.Pool(t), maintenance.Config{Schema: b.schema, ID: "river-client-7d1c", ProcessName: "maint-eu-1",
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { require.NoError(t, m.Stop(ctx)) })
	require.Eventually(t, func() bool {
		ps, err := b.adm.Processes(ctx)
		require.NoError(t, err)
		return ps.Leader != nil && ps.Leader.ProcessID != 0
	}, 30*time.Second, 20*time.Millisecond, "no maintenance leader elected")

	host, err := os.Hostname()
	require.NoError(t, err)
	status, body := b.get(t, "/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, fmt.Sprintf("Maintenance leader: maint-eu-1 (host %s, pid %d), since", host, os.Getpid()))
	require.NotContains(t, body, "river-client-7d1c")
}
