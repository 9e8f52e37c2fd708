package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
)

func (b *testBundle) processes(t *testing.T) *admin.Processes {
	t.Helper()
	adm, err := admin.New(pgtest.Pool(t), admin.Config{Schema: b.schema})
	require.NoError(t, err)
	ps, err := adm.Processes(context.Background())
	require.NoError(t, err)
	return ps
}

// leader returns the process marked leader, if one is.
func leader(ps *admin.Processes) (admin.Process, bool) {
	for _, p := range ps.Processes {
		if p.State == admin.ProcessLeader {
			return p, true
		}
	}
	return admin.Process{}, false
}

// Of two maintainers, the one River elected is marked leader, the other
// alive; when the leader stops cleanly its row goes, and the other is
// marked once River elects it.
func TestTheLeaderIsMarked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := func(name string) maintenance.Config {
		return maintenance.Config{ID: name, ProcessHeartbeat: pgbox.ProcessHeartbeatMin, ProcessName: name, ReplayInterval: -1}
	}
	maintainers := map[string]*maintenance.Maintainer{"maint-1": b.start(t, cfg("maint-1")), "maint-2": b.start(t, cfg("maint-2"))}

	var ps *admin.Processes
	require.Eventually(t, func() bool {
		ps = b.processes(t)
		_, ok := leader(ps)
		return ok && len(ps.Processes) == 2
	}, time.Minute, 10*time.Millisecond, "one of the maintainers leads")
	lead, _ := leader(ps)
	require.NotNil(t, ps.Leader)
	require.Equal(t, lead.RiverID, ps.Leader.RiverID)
	require.Equal(t, lead.ID, ps.Leader.ProcessID)
	require.Equal(t, lead.Name, lead.RiverID, "each was given its name as River id")
	var riverLeader string
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), b.sql("SELECT leader_id FROM /* schema */river_leader")).Scan(&riverLeader))
	require.Equal(t, riverLeader, lead.RiverID)
	for _, p := range ps.Processes {
		require.Equal(t, pgbox.ProcessMaintainer, p.Kind)
		if p.ID != lead.ID {
			require.Equal(t, admin.ProcessAlive, p.State)
		}
	}

	require.NoError(t, maintainers[lead.Name].Stop(context.Background()))
	other := map[string]string{"maint-1": "maint-2", "maint-2": "maint-1"}[lead.Name]
	require.Eventually(t, func() bool {
		ps = b.processes(t)
		l, ok := leader(ps)
		return ok && l.Name == other && len(ps.Processes) == 1
	}, time.Minute, 10*time.Millisecond, "the stopped leader's row is gone, and the other leads")
}

// A retention that would prune processes still beating is refused.
func TestProcessRetentionIsChecked(t *testing.T) {
	t.Parallel()
	_, err := maintenance.New(pgtest.Pool(t), maintenance.Config{ProcessRetention: time.Second})
	require.ErrorContains(t, err, "Config.ProcessRetention is 1s: use at least 1m0s")
	_, err = maintenance.New(pgtest.Pool(t), maintenance.Config{ProcessHeartbeat: time.Millisecond})
	require.ErrorContains(t, err, "Config.ProcessHeartbeat is 1ms: it must be at least 100ms")
}
