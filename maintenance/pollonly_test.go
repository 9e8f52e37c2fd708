package maintenance_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
)

// A poll-only Maintainer puts River in poll-only mode: River's client
// LISTENs on nothing. The same query sees the listener of one that is not.
func TestPollOnlyMaintainerDoesNotListen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	listeners := func() (n int) {
		// River listens on "<schema>.<topic>" channels.
		require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'listen%' AND query LIKE '%' || $1 || '.%'", b.schema).Scan(&n))
		return n
	}
	m := b.start(t, maintenance.Config{PollOnly: true, PruneInterval: time.Hour, ReplayInterval: -1})
	// By the time it leads, River would have been listening for long.
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */river_leader WHERE leader_id = $1)", m.ID())
	require.Zero(t, listeners())

	// The control: one that is not poll-only listens. Through a pooler,
	// River's LISTEN goes through it too and its server connection moves
	// on to other work, so pg_stat_activity cannot show it.
	if pgtest.ThroughPooler() {
		return
	}
	b.start(t, maintenance.Config{PruneInterval: time.Hour, ReplayInterval: -1})
	require.Eventually(t, func() bool { return listeners() > 0 }, 30*time.Second, 10*time.Millisecond)
}

// A Maintainer whose pool goes through a transaction-pooling PgBouncer,
// and which is not poll-only, has River listen through the pooler, where
// notifications do not arrive: it finds that out by its self-check and
// warns once, naming the fix.
func TestMaintainerWarnsWhenNotificationsDoNotArrive(t *testing.T) {
	t.Parallel()
	bouncer := pgtest.BouncerPool(t, 4)
	b := setup(t)
	logs := &logtest.Recorder{}
	m := b.startOn(t, bouncer, maintenance.Config{Logger: slog.New(logs), PruneInterval: time.Hour, ReplayInterval: -1})

	require.Eventually(t, func() bool { return logs.Count(slog.LevelWarn, "notifications do not arrive") > 0 }, time.Minute, 10*time.Millisecond)
	warning := logs.Records(slog.LevelWarn, "notifications do not arrive")[0].Message
	require.Contains(t, warning, "transaction-pooling PgBouncer")
	require.Contains(t, warning, "Config.PollOnly")
	// It goes on working meanwhile: River elects it leader by polling.
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */river_leader WHERE leader_id = $1)", m.ID())
	require.Equal(t, 1, logs.Count(slog.LevelWarn, "notifications do not arrive"), "said once")
}

// On a direct connection the self-check passes, and nothing is said above
// debug.
func TestMaintainerFindsNotificationsArrive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &logtest.Recorder{}
	b.startOn(t, directPool(t, 4), maintenance.Config{Logger: slog.New(logs), PruneInterval: time.Hour, ReplayInterval: -1})

	require.Eventually(t, func() bool { return logs.Count(slog.LevelDebug, "notifications arrive") == 1 }, time.Minute, 10*time.Millisecond)
	require.Zero(t, logs.Count(slog.LevelWarn, "notifications"))
}
