package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/dispatcher"
)

// The operators' pause (package admin, as inboxctl and the console make
// it) and the dispatcher's reading of it agree on what a pause is: a
// whole-consumer pause and an event type's, each seen by a running
// dispatcher with who paused and why, and gone once resumed, when a
// message received during the pause is handled, once. (That the paused
// messages wait is TestAPauseOfAnEventTypeStopsItsClaimsUntilResumed's.)
func TestTheOperatorsPauseIsTheDispatchersPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, err := dispatcher.New(b.pool, b.config(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
	}))
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	adm, err := admin.New(b.pool, admin.Config{Schema: b.schema})
	require.NoError(t, err)
	actor := admin.Actor{Name: "alice", Host: "laptop", PID: 7}

	for _, eventType := range []string{"", "OrderPlaced"} {
		_, err := adm.Pause(ctx, admin.PauseOptions{Actor: actor, Consumer: consumer, EventType: eventType, Reason: "gateway maintenance", Force: true})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return d.PauseErr() != nil }, 30*time.Second, 10*time.Millisecond, "event type %q", eventType)
		require.ErrorContains(t, d.PauseErr(), "alice")
		require.ErrorContains(t, d.PauseErr(), "gateway maintenance")
		if eventType != "" {
			require.ErrorContains(t, d.PauseErr(), eventType)
		}
		id := "paused-" + eventType
		b.receive(t, id)
		_, err = adm.Resume(ctx, admin.ResumeOptions{Actor: actor, Consumer: consumer, EventType: eventType})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return d.PauseErr() == nil }, 30*time.Second, 10*time.Millisecond, "event type %q", eventType)
		b.waitFor(t, "SELECT NOT EXISTS (SELECT 1 FROM /* schema */inbox WHERE status IN ('pending', 'running'))")
		require.Equal(t, 1, b.effects(t)[id])
	}
}
