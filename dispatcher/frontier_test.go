package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
)

// A message that turns pending behind the claims' frontier is still
// handled: received in a transaction that began before the messages the
// claims have since taken, it is found by the next claim that reads the
// pending index from its start. With claims that never did, it would wait
// for ever.
func TestALateMessageIsClaimedByAFullClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := b.newDispatcher(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
	})
	dispatcher.SetFrontier(d, 0, 300*time.Millisecond)
	require.NoError(t, d.Start(ctx))

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = b.inbox.ReceiveTx(ctx, tx, inbox.Message{ID: "late", EventType: "OrderPlaced", Payload: []byte("late")})
	require.NoError(t, err)
	// Messages received after the late one's transaction began, and
	// handled: the frontier is past its available_at.
	b.receive(t, "early-1")
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */effects WHERE message_id = 'early-1')")
	b.receive(t, "early-2")
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */effects WHERE message_id = 'early-2')")
	var late, early time.Time
	require.NoError(t, tx.QueryRow(ctx, b.sql("SELECT available_at FROM /* schema */inbox WHERE message_id = 'late'")).Scan(&late))
	b.scalar(t, &early, "SELECT available_at FROM /* schema */inbox WHERE message_id = 'early-1'")
	require.True(t, late.Before(early), "the late message (%s) is older than the ones handled (%s)", late, early)
	require.NoError(t, tx.Commit(ctx))

	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */effects WHERE message_id = 'late')")
	require.Equal(t, map[string]int{"early-1": 1, "early-2": 1, "late": 1}, b.effects(t))
}
