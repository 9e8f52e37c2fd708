package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// blockingHandlers returns handlers of both kinds that signal started and
// then wait for release or for their context to end. A message's effect
// is written only if it was released.
func blockingHandlers(b *testBundle, started chan<- string, release <-chan struct{}) map[string]dispatcher.Handler {
	return cancelledHandlers(b, started, release, nil)
}

// cancelledHandlers are blockingHandlers that also send the cause of their
// context's cancellation to causes.
func cancelledHandlers(b *testBundle, started chan<- string, release <-chan struct{}, causes chan<- error) map[string]dispatcher.Handler {
	wait := func(ctx context.Context, m *dispatcher.Message) error {
		started <- m.ID
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			if causes != nil {
				causes <- context.Cause(ctx)
			}
			return ctx.Err()
		}
	}
	return map[string]dispatcher.Handler{
		"InTx": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if err := wait(ctx, m); err != nil {
				return err
			}
			return b.recordEffect(ctx, tx, m)
		}),
		"Leased": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
			if err := wait(ctx, m); err != nil {
				return err
			}
			_, err := b.pool.Exec(ctx, b.sql("INSERT INTO /* schema */effects (message_id, attempt) VALUES ($1, $2)"), m.ID, m.Attempt)
			return err
		}),
	}
}

// Stop lets the handler in flight finish, then returns.
func TestStopWaitsForHandlersInFlight(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"InTx", "Leased"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.receiveAs(t, kind, "m")
			started, release := make(chan string, 1), make(chan struct{})
			d := b.start(t, dispatcher.Config{Handlers: blockingHandlers(b, started, release)})
			<-started

			stopped := make(chan error, 1)
			go func() { stopped <- d.Stop(context.Background()) }()
			select {
			case <-d.Stopped():
				t.Fatal("Stop finished while a handler was still running")
			case <-time.After(50 * time.Millisecond):
			}
			close(release)
			require.NoError(t, <-stopped)
			<-d.Stopped()

			require.Equal(t, "done", b.row(t, "m").Status)
			require.Equal(t, map[string]int{"m": 1}, b.effects(t))
		})
	}
}

// When Stop's deadline passes, handlers are cancelled (their context's
// cause is ErrStopped) and every message
// the worker held (the one in flight and the batch's unstarted ones) goes
// back to pending with its attempt refunded; a new dispatcher then handles
// each once.
func TestStopCancelsAtTheDeadlineAndLosesNothing(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"InTx", "Leased"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			all := ids("m", 5)
			b.receiveAs(t, kind, all...)
			started, causes := make(chan string, 10), make(chan error, 10)
			d := b.start(t, dispatcher.Config{
				BatchSize: 5,
				Workers:   1,
				Handlers:  cancelledHandlers(b, started, nil, causes), // never released
			})
			<-started

			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			require.NoError(t, d.Stop(ctx))
			// The handler can tell a shutdown from a timeout of its own.
			require.ErrorIs(t, <-causes, dispatcher.ErrStopped)

			for _, id := range all {
				r := b.row(t, id)
				require.Equal(t, "pending", r.Status, id)
				require.Zero(t, r.Attempts, "a shutdown must not spend an attempt: %s", id)
				require.Empty(t, r.Errors, id)
			}
			require.Empty(t, b.effects(t))

			release := make(chan struct{})
			close(release)
			b.start(t, dispatcher.Config{Handlers: blockingHandlers(b, make(chan string, 10), release)})
			b.waitSettled(t)
			effects := b.effects(t)
			for _, id := range all {
				require.Equal(t, 1, effects[id], id)
			}
		})
	}
}

func TestStartFailsFastOnAnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	schema := pgtest.EmptySchema(t)
	in, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: consumer, Schema: schema})
	require.NoError(t, err)
	d, err := dispatcher.New(pgtest.Pool(t), dispatcher.Config{
		Inbox:    in,
		Handlers: map[string]dispatcher.Handler{"E": dispatcher.Leased(func(context.Context, *dispatcher.Message) error { return nil })},
	})
	require.NoError(t, err)
	err = d.Start(context.Background())
	require.ErrorIs(t, err, pgbox.ErrSchemaNotMigrated)
	require.ErrorContains(t, err, "run inboxctl migrate up")
	require.NoError(t, d.Stop(context.Background()), "Stop after a failed Start is fine")
}

func TestLifecycleMisuse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := dispatcher.Config{Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)}}

	d := b.start(t, cfg)
	require.ErrorContains(t, d.Start(context.Background()), "already started")
	require.NoError(t, d.Stop(context.Background()))
	require.NoError(t, d.Stop(context.Background()), "a second Stop is a no-op")
	require.ErrorContains(t, d.Start(context.Background()), "Start after Stop")

	never := b.newDispatcher(t, cfg)
	require.NoError(t, never.Stop(context.Background()), "Stop before Start is fine")
	<-never.Stopped()
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	in, err := inbox.New(pool, inbox.Config{Consumer: "c"})
	require.NoError(t, err)
	ok := map[string]dispatcher.Handler{"E": dispatcher.Leased(func(context.Context, *dispatcher.Message) error { return nil })}

	_, err = dispatcher.New(nil, dispatcher.Config{Inbox: in, Handlers: ok})
	require.ErrorContains(t, err, "pool is nil")

	for want, cfg := range map[string]dispatcher.Config{
		"Config.Inbox is nil: pass the inbox":                         {Handlers: ok},
		"Config.Handlers is empty: map each event type":               {Inbox: in},
		`Config.Handlers["E"] is empty: build it with`:                {Inbox: in, Handlers: map[string]dispatcher.Handler{"E": {}}},
		"Config.BatchSize is -1":                                      {Inbox: in, Handlers: ok, BatchSize: -1},
		"Config.Workers is -2":                                        {Inbox: in, Handlers: ok, Workers: -2},
		"Config.HandlerTimeout is -1s":                                {Inbox: in, Handlers: ok, HandlerTimeout: -time.Second},
		"Config.Lease (30s) must exceed Config.HandlerTimeout (1m0s)": {Inbox: in, Handlers: ok, Lease: 30 * time.Second},
		"Config.PollInterval is 1µs":                                  {Inbox: in, Handlers: ok, PollInterval: time.Microsecond},
	} {
		_, err := dispatcher.New(pool, cfg)
		require.ErrorContains(t, err, want)
	}

	// Several problems are reported at once.
	_, err = dispatcher.New(pool, dispatcher.Config{BatchSize: -1})
	require.ErrorContains(t, err, "Config.Inbox is nil")
	require.ErrorContains(t, err, "Config.BatchSize is -1")
}
