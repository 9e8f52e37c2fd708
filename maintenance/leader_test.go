package maintenance_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
)

// TestChildProcess is what a child process started by a test runs: a
// Maintainer on the schema in PGBOX_TEST_SCHEMA, pruning every second,
// until SIGTERM stops it cleanly.
func TestChildProcess(t *testing.T) {
	if !pgtest.IsChild() {
		t.Skip("run as a child process by TestThreeProcessesRunEachPeriodOnce")
	}
	pool := pgtest.NewPool(t, 5)
	m, err := maintenance.New(pool, maintenance.Config{
		ID:             pgtest.ChildRole(),
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, nil)),
		PruneInterval:  time.Second,
		ReplayInterval: -1,
		Schema:         os.Getenv("PGBOX_TEST_SCHEMA"),
	})
	require.NoError(t, err)
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	require.NoError(t, m.Start(context.Background()))
	fmt.Println("started", m.ID())
	<-terms
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, m.Stop(ctx))
	fmt.Println("stopped")
}

// Three processes run maintenance on one schema. One of them, the leader,
// enqueues the retention job once per second; each run is worked once, by
// one process. When the leader stops, another takes over, and still no
// second has two runs. Everything is read from River's tables.
func TestThreeProcessesRunEachPeriodOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	children := map[string]*pgtest.Child{}
	for i := range 3 {
		id := fmt.Sprintf("maint-%d", i+1)
		c := pgtest.StartChild(t, "TestChildProcess", id, "PGBOX_TEST_SCHEMA="+b.schema)
		line, ok := c.Line(time.Minute)
		require.True(t, ok, "child %s did not start: %s", id, c.Stderr())
		require.Equal(t, "started "+id, line)
		children[id] = c
	}

	b.waitFor(t, "SELECT count(*) >= 4 FROM /* schema */river_job WHERE kind = 'pgbox.prune' AND state = 'completed'")
	var first string
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, b.sql("SELECT leader_id FROM /* schema */river_leader")).Scan(&first))
	require.Contains(t, children, first)

	// The leader stops cleanly: it resigns, and another is elected.
	require.NoError(t, children[first].Signal(syscall.SIGTERM))
	line, ok := children[first].Line(time.Minute)
	require.True(t, ok)
	require.Equal(t, "stopped", line)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, children[first].Wait(waitCtx))
	b.waitFor(t, `SELECT count(*) >= 3 FROM /* schema */river_job
		WHERE kind = 'pgbox.prune' AND state = 'completed' AND args->>'enqueued_by' <> $1`, first)

	for id, c := range children {
		if id != first {
			require.NoError(t, c.Signal(syscall.SIGTERM))
			line, ok := c.Line(time.Minute)
			require.True(t, ok)
			require.Equal(t, "stopped", line)
		}
	}

	jobs := b.completedJobs(t, "pgbox.prune")
	periods := map[time.Time]bool{}
	var enqueuers []string // in order, without repeats
	for _, j := range jobs {
		require.Equal(t, 1, j.Attempt, "each run is worked once")
		require.Len(t, j.AttemptedBy, 1)
		require.Contains(t, children, j.AttemptedBy[0])
		period := j.ScheduledAt.Truncate(time.Second)
		require.False(t, periods[period], "two runs in the second starting %s", period)
		periods[period] = true
		if len(enqueuers) == 0 || enqueuers[len(enqueuers)-1] != j.EnqueuedBy {
			enqueuers = append(enqueuers, j.EnqueuedBy)
		}
	}
	require.Len(t, enqueuers, 2, "one leader until it stopped, then one other: %s", strings.Join(enqueuers, ", "))
	require.Equal(t, first, enqueuers[0])
	require.NotEqual(t, first, enqueuers[1])
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */river_job WHERE state IN ('retryable', 'discarded', 'cancelled')"))
}
