package maintenance_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
)

// TestReplayerChildProcess is what TestThrottledReplaySurvivesKill9 runs
// in a child process: a Maintainer running scheduled replays every second
// on the schema in PGBOX_TEST_SCHEMA, until it is killed.
func TestReplayerChildProcess(t *testing.T) {
	if !pgtest.IsChild() {
		t.Skip("run as a child process by TestThrottledReplaySurvivesKill9")
	}
	m, err := maintenance.New(pgtest.NewPool(t, 5), maintenance.Config{
		ID:             pgtest.ChildRole(),
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, nil)),
		PruneInterval:  time.Hour,
		ReplayInterval: time.Second,
		Schema:         os.Getenv("PGBOX_TEST_SCHEMA"),
	})
	require.NoError(t, err)
	require.NoError(t, m.Start(context.Background()))
	fmt.Println("started", m.ID())
	select {} // until SIGKILL
}

// A maintainer SIGKILLed in the middle of a throttled replay leaves the
// replay's progress, its messages and its audit count agreeing; the next
// maintainer resumes it, replays no message twice, and finishes it.
func TestThrottledReplaySurvivesKill9(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		SELECT 'payments', 'order-' || g, 'ChargeCard', 'dead', 3, 3, '\x00'::bytea, ''::bytea, 'gateway timeout', /* schema */inbox_bucket('order-' || g)
		FROM generate_series(1, 60) AS g`)
	adm, err := admin.New(pgtest.Pool(t), admin.Config{Schema: b.schema})
	require.NoError(t, err)
	r, err := adm.ScheduleReplay(ctx, admin.ScheduleReplayOptions{Rate: 10})
	require.NoError(t, err)

	start := func(id string) *pgtest.Child {
		c := pgtest.StartChild(t, "TestReplayerChildProcess", id, "PGBOX_TEST_SCHEMA="+b.schema)
		line, ok := c.Line(time.Minute)
		require.True(t, ok, "child %s did not start: %s", id, c.Stderr())
		require.Equal(t, "started "+id, line)
		return c
	}
	agree := `SELECT r.replayed = (SELECT count(*) FROM /* schema */inbox WHERE replays = 1)
		AND r.replayed = l.affected AND r.replayed <= r.rate * extract(epoch FROM now() - r.run_at) + 1
		FROM /* schema */scheduled_replays AS r JOIN /* schema */audit_log AS l ON l.id = r.audit_id WHERE r.id = $1`

	first := start("replayer-1")
	b.waitFor(t, "SELECT replayed >= 10 FROM /* schema */scheduled_replays WHERE id = $1", r.ID)
	first.Kill()
	require.EqualValues(t, 1, b.count(t, "SELECT count(*) FROM ("+agree+") AS a(ok) WHERE ok", r.ID),
		"after the kill, progress, messages and audit count agree")
	require.Less(t, b.count(t, "SELECT replayed FROM /* schema */scheduled_replays WHERE id = $1", r.ID), int64(60))

	start("replayer-2")
	b.waitFor(t, "SELECT state = 'done' FROM /* schema */scheduled_replays WHERE id = $1", r.ID)
	require.EqualValues(t, 60, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE status = 'pending' AND replays = 1"))
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE replays > 1"), "no message replayed twice")
	require.EqualValues(t, 1, b.count(t, "SELECT count(*) FROM ("+agree+") AS a(ok) WHERE ok", r.ID))
	b.waitFor(t, `SELECT state = 'finished' AND affected = 60 FROM /* schema */audit_log
		WHERE id = (SELECT audit_id FROM /* schema */scheduled_replays WHERE id = $1)`, r.ID)
}
