package notify_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/notify"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// A Listener whose self-checks never come back (here: they are sent on
// another channel, as a pooler loses them) makes at most ProbeTries of
// them, then stops listening and closes its connection: behind
// PgBouncer 1.18 every probe risks the pooler (pgbouncer#822). Without a
// bound it goes on probing.
func TestListenerStopsAfterProbeTries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	for _, tries := range []int{3, 0} {
		channel := fmt.Sprintf("pgbox_test_probe_%d", rand.Int64())
		app := fmt.Sprintf("pgbox probe test %d", rand.Int64())
		// Direct, so that pg_stat_activity shows the listener's own
		// application_name when the tests run through a pooler.
		connConfig, err := pgx.ParseConfig(pgtest.DirectURL(t))
		require.NoError(t, err)
		connConfig.RuntimeParams["application_name"] = app
		var probes, failed atomic.Int32
		l := notify.Start(notify.Config{
			Channel:      channel,
			ConnConfig:   connConfig,
			Logger:       slog.New(slog.DiscardHandler),
			OnConnect:    func() {},
			OnNotify:     func(string) {},
			OnProbe:      func(arrived bool) { require.False(t, arrived); failed.Add(1) },
			PingInterval: 20 * time.Millisecond,
			ProbeTimeout: 20 * time.Millisecond,
			ProbeTries:   tries,
			Probe: func(ctx context.Context, payload string) error {
				probes.Add(1)
				return notify.Send(ctx, pool, channel+"_elsewhere", payload)
			},
		})
		listening := func() bool {
			var n int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n))
			return n > 0
		}
		if tries > 0 {
			require.Eventually(t, func() bool { return failed.Load() == int32(tries) && !listening() }, 30*time.Second, 10*time.Millisecond,
				"the listener must give up after %d failed probes and close its connection", tries)
			require.Equal(t, int32(tries), probes.Load(), "no probe after the last try")
		} else {
			require.Eventually(t, func() bool { return failed.Load() > 5 }, 30*time.Second, 10*time.Millisecond,
				"without a bound the listener probes at every idle ping")
			require.True(t, listening())
		}
		l.Close()
	}
}
