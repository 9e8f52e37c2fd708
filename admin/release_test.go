package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
)

// releaseFixture registers a live dispatcher (7), a dead one (8) and a dead
// relay (10), each with leases: 8 holds "held" and "held-2" and has
// "expired", whose lease already ended; 10 holds one outbox row.
func releaseFixture(t *testing.T, b *testBundle) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */processes (id, kind, consumer, name, host, pid, version, heartbeat_ms, last_seen_at) VALUES
		(7, 'dispatcher', 'payments', 'live', 'h', 1, 'v', 60000, now()),
		(8, 'dispatcher', 'payments', 'gone', 'h', 2, 'v', 1000, now() - interval '4 seconds'),
		(10, 'relay', NULL, 'relay-gone', 'h', 3, 'v', 1000, now() - interval '4 seconds');
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, max_attempts, attempts, available_at, claim_token, payload_hash, payload, bucket) VALUES
		('payments', 'held', 'E', 'running', 3, 1, now() + interval '1 hour', (8::bigint << 32) | 1, '\x00', '', /* schema */inbox_bucket('held')),
		('payments', 'held-2', 'E', 'running', 3, 1, now() + interval '1 hour', (8::bigint << 32) | 1, '\x00', '', /* schema */inbox_bucket('held-2')),
		('payments', 'expired', 'E', 'running', 3, 1, now() - interval '1 second', (8::bigint << 32) | 2, '\x00', '', /* schema */inbox_bucket('expired')),
		('payments', 'other', 'E', 'running', 3, 1, now() + interval '1 hour', (7::bigint << 32) | 1, '\x00', '', /* schema */inbox_bucket('other'));
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, attempts, available_at, claim_token, bucket)
		SELECT x.id, 't', 'E', '', 'running', 1, now() + interval '1 hour', (10::bigint << 32) | 1, /* schema */outbox_bucket(x.id)
		FROM (SELECT gen_random_uuid() AS id) AS x`, b.schema))
	require.NoError(t, err)
}

// leaseEnded reports whether inbox message id's lease has ended, and its
// claim token.
func (b *testBundle) leaseEnded(t *testing.T, id string) (bool, int64) {
	t.Helper()
	var (
		ended bool
		token int64
	)
	require.NoError(t, b.pool.QueryRow(context.Background(), ident.Render(
		"SELECT available_at <= now(), claim_token FROM /* schema */inbox WHERE message_id = $1", b.schema), id).Scan(&ended, &token))
	return ended, token
}

// A dead dispatcher's held leases end at once, with their claim tokens
// kept for the takeover's fence and attempt accounting; nobody else's
// change, and the release is audited. A dead relay's outbox rows likewise.
func TestReleaseLeasesOfADeadProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	releaseFixture(t, b)

	n, err := b.adm.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{ProcessID: 8, Actor: admin.Actor{Name: "alice"}})
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "held and held-2; expired had nothing left to release")
	for _, id := range []string{"held", "held-2"} {
		ended, token := b.leaseEnded(t, id)
		require.True(t, ended, id)
		require.Equal(t, int64(8<<32|1), token, "the claim token stays: the takeover records the lost attempt, and fences the old holder")
	}
	ended, _ := b.leaseEnded(t, "other")
	require.False(t, ended, "a live process's lease is not touched")

	ps, err := b.adm.Processes(ctx)
	require.NoError(t, err)
	for _, p := range ps.Processes {
		if p.ID == 8 {
			require.Zero(t, p.Leases)
			require.EqualValues(t, 3, p.ExpiredLeases)
		}
	}

	n, err = b.adm.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{ProcessID: 10})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the dead relay's outbox row")

	records, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{Action: admin.AuditReleaseLeases})
	require.NoError(t, err)
	require.Len(t, records, 2)
	require.Equal(t, "alice", records[1].Actor.Name)
	require.EqualValues(t, 2, records[1].Affected)
	require.Equal(t, admin.AuditFinished, records[1].State)
	require.JSONEq(t, `{"alive": false, "consumer": "payments", "host": "h", "kind": "dispatcher", "name": "gone", "pid": 2, "process_id": 8}`,
		string(records[1].Selection))
}

// An alive process is refused without Force, an unknown one is not found,
// and neither changes anything or leaves an audit record.
func TestReleaseLeasesRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	releaseFixture(t, b)

	_, err := b.adm.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{ProcessID: 7})
	require.ErrorIs(t, err, admin.ErrProcessAlive)
	require.ErrorContains(t, err, "dispatcher live (id 7, host h, pid 1)")
	ended, _ := b.leaseEnded(t, "other")
	require.False(t, ended)

	_, err = b.adm.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{ProcessID: 99})
	require.ErrorIs(t, err, admin.ErrNotFound)
	_, err = b.adm.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{})
	require.ErrorContains(t, err, "ProcessID is 0")

	records, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{Action: admin.AuditReleaseLeases})
	require.NoError(t, err)
	require.Empty(t, records)

	n, err := b.adm.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{ProcessID: 7, Force: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	ended, _ = b.leaseEnded(t, "other")
	require.True(t, ended)
}

// Releasing the leases of a process that was in fact alive (forced) is
// safe: another dispatcher takes the message over, counting the lost
// attempt, and handles it; the old holder's late result, a failure here,
// is fenced off by the claim token and changes nothing.
func TestReleasedLeaseFencesALateResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	in, err := inbox.New(b.pool, inbox.Config{Consumer: "payments", MaxAttempts: 3, Schema: b.schema})
	require.NoError(t, err)
	_, err = in.Receive(ctx, inbox.Message{ID: "charge-1", EventType: "ChargeCard", Payload: []byte(`{}`)})
	require.NoError(t, err)

	held, late := make(chan struct{}), make(chan struct{})
	handled := make(chan int, 2)
	start := func(name string) *dispatcher.Dispatcher {
		d, err := dispatcher.New(b.pool, dispatcher.Config{
			Inbox: in, Logger: slog.New(slog.DiscardHandler), ProcessName: name, Workers: 1,
			PollInterval: 20 * time.Millisecond, HandlerTimeout: time.Hour, Lease: 2 * time.Hour, // only a release ends the lease
			Handlers: map[string]dispatcher.Handler{"ChargeCard": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
				if m.Attempt == 1 {
					close(held)
					<-late // a process frozen past the release
					return errors.New("late failure of the first attempt")
				}
				handled <- m.Attempt
				return nil
			})},
		})
		require.NoError(t, err)
		require.NoError(t, d.Start(ctx))
		t.Cleanup(func() {
			stop, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			require.NoError(t, d.Stop(stop))
		})
		return d
	}
	holderD := start("holder")
	var unfreeze sync.Once
	// Registered after the holder's Stop, so it runs before it: a failed
	// test must not leave the frozen handler blocking Stop for ever.
	t.Cleanup(func() { unfreeze.Do(func() { close(late) }) })
	<-held
	start("taker") // its one worker is free; the holder's is held

	var holder int64
	ps, err := b.adm.Processes(ctx)
	require.NoError(t, err)
	for _, p := range ps.Processes {
		if p.Name == "holder" {
			holder = p.ID
			require.EqualValues(t, 1, p.Leases)
		}
	}
	_, err = b.adm.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{ProcessID: holder})
	require.ErrorIs(t, err, admin.ErrProcessAlive)
	n, err := b.adm.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{ProcessID: holder, Force: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	select {
	case attempt := <-handled:
		require.Equal(t, 2, attempt, "the takeover counts the lost attempt")
	case <-time.After(30 * time.Second):
		t.Fatal("the released message was not taken over")
	}
	require.Eventually(t, func() bool {
		d, err := b.adm.Show(ctx, "payments", "charge-1")
		require.NoError(t, err)
		return d.Status == "done"
	}, 30*time.Second, 10*time.Millisecond)

	unfreeze.Do(func() { close(late) }) // the holder's late failure arrives after the takeover finished
	stop, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, holderD.Stop(stop), "Stop returns once the holder's result is recorded, or fenced off")
	d, err := b.adm.Show(ctx, "payments", "charge-1")
	require.NoError(t, err)
	require.Equal(t, "done", string(d.Status))
	require.Equal(t, 2, d.Attempts)
	for _, h := range d.History {
		require.NotContains(t, h.Error, "late failure", "the fenced result must not be recorded")
	}
}
