package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Liveness settings for these tests: a dispatcher not seen for three
// heartbeats (3s) is dead, and its leases outlast the test.
const (
	livenessHeartbeat = time.Second
	livenessLease     = 5 * time.Minute
)

// TestLivenessChild is not a test: it is the body of the child process
// TestSIGKILLedDispatcherShowsDeadWithItsLeases kills. Its dispatcher,
// named "doomed", takes one batch of leased messages and hangs in the
// first handler until killed.
func TestLivenessChild(t *testing.T) {
	if pgtest.ChildRole() != "liveness" {
		t.Skip("the body of a child process started by TestSIGKILLedDispatcherShowsDeadWithItsLeases")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	in, err := inbox.New(pool, inbox.Config{Consumer: consumer, Schema: os.Getenv("PGBOX_TEST_SCHEMA")})
	require.NoError(t, err)
	d, err := dispatcher.New(pool, dispatcher.Config{
		BatchSize:      8,
		HandlerTimeout: livenessLease - time.Minute,
		Handlers: map[string]dispatcher.Handler{"Leased": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
			fmt.Println("called", m.ID)
			<-ctx.Done()
			return ctx.Err()
		})},
		Inbox:            in,
		Lease:            livenessLease,
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PollOnly:         true,
		PollInterval:     20 * time.Millisecond,
		ProcessHeartbeat: livenessHeartbeat,
		ProcessName:      "doomed",
		Workers:          1,
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	select {} // until killed
}

// processNamed returns the registered process called name, if any.
func processNamed(t *testing.T, adm *admin.Admin, name string) (admin.Process, bool) {
	t.Helper()
	ps, err := adm.Processes(context.Background())
	require.NoError(t, err)
	for _, p := range ps.Processes {
		if p.Name == name {
			return p, true
		}
	}
	return admin.Process{}, false
}

func (b *testBundle) admin(t *testing.T) *admin.Admin {
	t.Helper()
	adm, err := admin.New(b.pool, admin.Config{Schema: b.schema})
	require.NoError(t, err)
	return adm
}

// A dispatcher process killed with SIGKILL while its leased handlers run
// stays in the processes table, shown dead once it misses three
// heartbeats, with the leases its claim still holds and when they end.
func TestSIGKILLedDispatcherShowsDeadWithItsLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	adm := b.admin(t)
	b.receiveAs(t, "Leased", ids("m", 8)...)

	child := pgtest.StartChild(t, "TestLivenessChild", "liveness", "PGBOX_TEST_SCHEMA="+b.schema)
	waitLine(t, child, "called")
	alive, ok := processNamed(t, adm, "doomed")
	require.True(t, ok, "the child registered")
	require.Equal(t, admin.ProcessAlive, alive.State)
	require.Equal(t, pgbox.ProcessDispatcher, alive.Kind)
	require.Equal(t, consumer, alive.Consumer)
	require.EqualValues(t, 8, alive.Leases, "its one batch of leased messages")

	child.Kill()
	var dead admin.Process
	require.Eventually(t, func() bool {
		dead, _ = processNamed(t, adm, "doomed")
		return dead.State == admin.ProcessDead
	}, time.Minute, 10*time.Millisecond, "the killed dispatcher must show as dead")
	require.Equal(t, alive.ID, dead.ID)
	require.EqualValues(t, 8, dead.Leases, "its leases are still held")
	require.Zero(t, dead.ExpiredLeases)
	require.NotNil(t, dead.LeasesEnd)
	var leaseEnd time.Time
	b.scalar(t, &leaseEnd, "SELECT max(available_at) FROM /* schema */inbox WHERE status = 'running'")
	require.True(t, leaseEnd.Equal(*dead.LeasesEnd), "the last lease ends at %s, reported %s", leaseEnd, dead.LeasesEnd)
	// Dead as soon as its silence exceeds the limit by any fraction, which
	// SinceSeen, rounded to the millisecond, may not show (3.0004s is 3s).
	require.GreaterOrEqual(t, time.Duration(dead.SinceSeen), time.Duration(pgbox.ProcessDeadAfter)*livenessHeartbeat)

	// Once the leases have run out (moved to the past here), the messages
	// show as expired and not yet taken over.
	b.exec(t, "UPDATE /* schema */inbox SET available_at = now() - interval '1 second' WHERE status = 'running'")
	dead, _ = processNamed(t, adm, "doomed")
	require.Zero(t, dead.Leases)
	require.EqualValues(t, 8, dead.ExpiredLeases)
	require.Nil(t, dead.LeasesEnd)
}

// A dispatcher registers on Start, with its consumer, and a clean Stop
// removes its row.
func TestCleanStopRemovesTheProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	adm := b.admin(t)
	d := b.start(t, dispatcher.Config{
		Handlers:         map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
		ProcessHeartbeat: livenessHeartbeat,
		ProcessName:      "payments-1",
	})
	p, ok := processNamed(t, adm, "payments-1")
	require.True(t, ok, "registered by Start")
	require.Equal(t, admin.ProcessAlive, p.State)
	require.Equal(t, consumer, p.Consumer)

	b.receive(t, ids("m", 40)...)
	b.waitSettled(t)
	var foreign int
	b.scalar(t, &foreign, "SELECT count(*) FROM /* schema */inbox WHERE claim_token >> 32 <> $1", p.ID)
	require.Zero(t, foreign, "every claim token carries the dispatcher's id")

	require.NoError(t, d.Stop(context.Background()))
	_, ok = processNamed(t, adm, "payments-1")
	require.False(t, ok, "a clean Stop removes the row")
}

// A dispatcher whose registration fails (here the table is missing) works
// all the same, says so once, and registers once it can.
func TestDispatcherWorksWhileRegistrationFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, "ALTER TABLE /* schema */processes RENAME TO processes_away")
	var logs logtest.Recorder
	b.start(t, dispatcher.Config{
		Handlers:         map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
		Logger:           slog.New(&logs),
		ProcessHeartbeat: livenessHeartbeat,
		ProcessName:      "unregistered",
	})
	b.receive(t, ids("m", 40)...)
	b.waitSettled(t)
	require.Len(t, b.effects(t), 40, "the messages were handled")
	require.Equal(t, 1, logs.Count(slog.LevelWarn, "cannot record in the processes table"))

	b.exec(t, "ALTER TABLE /* schema */processes_away RENAME TO processes")
	require.Eventually(t, func() bool { _, ok := processNamed(t, b.admin(t), "unregistered"); return ok },
		time.Minute, 10*time.Millisecond, "the dispatcher registers once the table is back")
}
