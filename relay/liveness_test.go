package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// relayNamed returns the registered process called name, read through
// the direct pool.
func (b *testBundle) relayNamed(t *testing.T, name string) (admin.Process, bool) {
	t.Helper()
	adm, err := admin.New(b.pool, admin.Config{Schema: b.schema})
	require.NoError(t, err)
	ps, err := adm.Processes(context.Background())
	require.NoError(t, err)
	for _, p := range ps.Processes {
		if p.Name == name {
			return p, true
		}
	}
	return admin.Process{}, false
}

// A relay whose pool goes through a transaction-pooling PgBouncer
// registers, beats and deregisters through it: no statement needs a
// session.
func TestRelayRegistersThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	bouncer := bouncerPool(t)
	b := setup(t)
	r := startOn(t, bouncer, relay.Config{
		PollInterval:     20 * time.Millisecond,
		PollOnly:         true,
		ProcessHeartbeat: pgbox.ProcessHeartbeatMin,
		ProcessName:      "relay-via-pgbouncer",
		Publisher:        &recorder{},
		Schema:           b.schema,
	})
	first, ok := b.relayNamed(t, "relay-via-pgbouncer")
	require.True(t, ok, "registered through the pooler")
	require.Equal(t, pgbox.ProcessRelay, first.Kind)
	require.Equal(t, admin.ProcessAlive, first.State)
	require.Eventually(t, func() bool {
		p, _ := b.relayNamed(t, "relay-via-pgbouncer")
		return p.LastSeen.After(first.LastSeen)
	}, time.Minute, 10*time.Millisecond, "heartbeats through the pooler")

	require.NoError(t, r.Stop(context.Background()))
	_, ok = b.relayNamed(t, "relay-via-pgbouncer")
	require.False(t, ok, "deregistered through the pooler")
}

// The rows a relay is publishing hold no lease: they stay pending, locked
// by the batch's transaction and named by its claim record, so the
// processes view counts none, and a relay that dies lets them go at once.
func TestRowsBeingPublishedHoldNoLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	publishing := make(chan struct{}, 1)
	b.start(t, relay.Config{
		ProcessName: "relay-1",
		// One worker, so that one claim takes both rows: two workers'
		// claims may split them, each skipping the row the other locked.
		Workers: 1,
		Publisher: &recorder{fail: func(string, *message.Message) error {
			select {
			case publishing <- struct{}{}:
			default:
			}
			<-release
			return nil
		}},
	})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the relay's Stop, should the test fail
	ids := b.write(t, outbox.Message{Topic: "t", EventType: "E", Payload: []byte("1")},
		outbox.Message{Topic: "t", EventType: "E", Payload: []byte("2")})
	<-publishing

	p, ok := b.relayNamed(t, "relay-1")
	require.True(t, ok)
	require.Zero(t, p.Leases)
	var pending int
	var claimed []string
	// The record was sent before the publish; its answer is read after.
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(`
			SELECT (SELECT count(*) FROM /* schema */outbox WHERE status = 'pending'),
			       (SELECT array_agg(id::text ORDER BY id) FROM /* schema */outbox_claims, unnest(ids) AS id)`)).Scan(&pending, &claimed))
		return len(claimed) > 0
	}, 10*time.Second, time.Millisecond, "the batch being published has no claim record")
	require.Equal(t, 2, pending, "both rows are pending while they are published")
	require.Equal(t, strs(ids), claimed, "both rows were claimed in one batch, and its record names them while they are published")
	releaseOnce.Do(func() { close(release) })
	b.waitPublished(t)
	b.waitFor(t, "SELECT NOT EXISTS (SELECT 1 FROM /* schema */outbox_claims)")
}
