package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/dispatcher"
)

// Leased messages queued behind slow ones in a batch keep their leases
// while their worker is alive: no idle worker "rescues" them, no attempt is
// spent, no crash is recorded.
func TestLeasedMessagesWaitingInABatchKeepTheirLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all := ids("m", 24)
	b.receiveAs(t, "Leased", all...)
	b.exec(t, "UPDATE /* schema */inbox SET max_attempts = 1")

	b.start(t, dispatcher.Config{
		BatchSize:      8,
		Workers:        6,               // idle workers ready to take over any lease that runs out
		HandlerTimeout: 2 * time.Second, // headroom for a loaded machine
		Lease:          3 * time.Second, // a batch takes 4 s; the heartbeat renews every third of the lease
		Handlers: map[string]dispatcher.Handler{"Leased": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
			time.Sleep(500 * time.Millisecond)
			_, err := b.pool.Exec(ctx, b.sql("INSERT INTO /* schema */effects (message_id, attempt) VALUES ($1, $2)"), m.ID, m.Attempt)
			return err
		})},
	})
	b.waitSettled(t)

	var expired, notDone int
	b.scalar(t, &expired, "SELECT count(*) FROM /* schema */inbox WHERE errors::text LIKE '%lease expired%'")
	b.scalar(t, &notDone, "SELECT count(*) FROM /* schema */inbox WHERE status <> 'done'")
	require.Zero(t, expired, "no lease may run out while its worker is alive")
	require.Zero(t, notDone)
	effects := b.effects(t)
	for _, id := range all {
		require.Equal(t, 1, effects[id], id)
	}
}

// A worker that stalls inside its batch transaction (a paused process, a
// network cut) holds its rows locked; the server ends the transaction after
// a lease's worth of idleness, and another worker then handles the message
// once. The stalled handler ignores its context, as a frozen process would.
func TestStalledWorkerLosesItsRowsAfterTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receive(t, "m")
	lease := dispatcher.Config{HandlerTimeout: 200 * time.Millisecond, Lease: 600 * time.Millisecond, Workers: 1}

	stalled, release := make(chan struct{}), make(chan struct{})
	stallCfg := lease
	stallCfg.Handlers = map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
		if err := b.recordEffect(ctx, tx, m); err != nil {
			return err
		}
		close(stalled)
		<-release // frozen: no statement, no context
		return nil
	})}
	staller := b.start(t, stallCfg)
	var unfreeze sync.Once
	// Registered after the staller's Stop, so it runs before it: a failed
	// test must not leave the frozen handler blocking Stop for ever.
	t.Cleanup(func() { unfreeze.Do(func() { close(release) }) })
	<-stalled

	rescueCfg := lease
	rescueCfg.Handlers = map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)}
	b.start(t, rescueCfg)
	b.waitSettled(t)

	unfreeze.Do(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, staller.Stop(ctx))

	rows, err := b.pool.Query(context.Background(), b.sql("SELECT attempt FROM /* schema */effects"))
	require.NoError(t, err)
	attempts, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{2}, attempts, "only the rescuer's attempt may leave an effect")
	r := b.row(t, "m")
	require.Equal(t, "done", r.Status)
	require.Equal(t, 2, r.Attempts)
}

// A handler that answers Stop's cancellation with Permanent is taken at
// its word: the message is dead, not released.
func TestStopHonoursPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receive(t, "m")
	started := make(chan struct{})
	d := b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
			close(started)
			<-ctx.Done()
			return dispatcher.Permanent(errors.New("cannot resume this job after an interruption"))
		})},
	})
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.NoError(t, d.Stop(ctx))

	r := b.row(t, "m")
	require.Equal(t, "dead", r.Status)
	require.Equal(t, "permanent: cannot resume this job after an interruption", *r.LastError)
}
