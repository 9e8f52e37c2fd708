package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Processes reads a live dispatcher, a dead one with a held and an expired
// lease, and River's leader, in the suite's query mode and both untyped ones.
func TestProcessesInEachQueryMode(t *testing.T) {
	t.Parallel()
	for name, newPool := range pgtest.PoolsByMode() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupOn(t, newPool(t), admin.Config{})
			_, err := pgtest.Pool(t).Exec(ctx, ident.Render(`
				INSERT INTO /* schema */processes (id, kind, consumer, name, host, pid, version, river_id, heartbeat_ms, last_seen_at) VALUES
				(7, 'dispatcher', 'payments', 'live', 'h', 1, 'v', NULL, 60000, now()),
				(8, 'dispatcher', 'payments', 'gone', 'h', 2, 'v', NULL, 1000, now() - interval '4 seconds'),
				(9, 'maintainer', NULL, 'maint', 'h', 1, 'v', 'river-1', 60000, now());
				INSERT INTO /* schema */river_leader (leader_id, elected_at, expires_at) VALUES ('river-1', now(), now() + interval '1 minute');
				INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, max_attempts, available_at, claim_token, payload_hash, payload, bucket) VALUES
				('payments', 'held', 'E', 'running', 1, now() + interval '1 hour', (8::bigint << 32) | 1, '\x00', '', /* schema */inbox_bucket('held')),
				('payments', 'expired', 'E', 'running', 1, now() - interval '1 second', (8::bigint << 32) | 2, '\x00', '', /* schema */inbox_bucket('expired')),
				('payments', 'other', 'E', 'running', 1, now() + interval '1 hour', (7::bigint << 32) | 1, '\x00', '', /* schema */inbox_bucket('other'))`, b.schema))
			require.NoError(t, err)

			ps, err := b.adm.Processes(ctx)
			require.NoError(t, err)
			require.Equal(t, pgbox.ProcessDeadAfter, ps.DeadAfter)
			require.NotNil(t, ps.Leader)
			require.Equal(t, admin.Leader{ElectedAt: ps.Leader.ElectedAt, ExpiresAt: ps.Leader.ExpiresAt, ProcessID: 9, RiverID: "river-1"}, *ps.Leader)
			got := map[string]admin.Process{}
			for _, p := range ps.Processes {
				got[p.Name] = p
			}
			require.Len(t, got, 3)
			require.Equal(t, admin.ProcessAlive, got["live"].State)
			require.EqualValues(t, 1, got["live"].Leases)
			require.Equal(t, admin.ProcessDead, got["gone"].State, "4s unseen with a 1s heartbeat")
			require.EqualValues(t, 1, got["gone"].Leases)
			require.EqualValues(t, 1, got["gone"].ExpiredLeases)
			require.WithinDuration(t, time.Now().Add(time.Hour), *got["gone"].LeasesEnd, time.Minute)
			require.Equal(t, time.Second, time.Duration(got["gone"].Heartbeat))
			require.Equal(t, admin.ProcessLeader, got["maint"].State)
		})
	}
}
