package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	gometrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/pgtest"
)

// sarama's metrics (the Kafka relay case) start a process-wide goroutine
// that never ends, which the leak check after the tests would report: the
// bench reads none of them.
func init() { gometrics.UseNilMetrics = true }

// TestMain makes the test binary the memory case's drainer, or a relay
// process of the relay-scaling case, when the case starts it as its child,
// as pgbox-bench's main does.
func TestMain(m *testing.M) {
	if n := os.Getenv(MemoryChildEnv); n != "" {
		backlog, err := strconv.ParseInt(n, 10, 64)
		if err == nil {
			err = RunMemoryChild(context.Background(), os.Getenv("DATABASE_URL"), backlog)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "memory drainer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if broker := os.Getenv(RelayChildEnv); broker != "" {
		if err := RunRelayChild(context.Background(), os.Getenv("DATABASE_URL"), os.Getenv("NATS_URL"), broker); err != nil {
			fmt.Fprintln(os.Stderr, "relay process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	pgtest.Main(m, pgtest.PubSubGoroutines...)
}

// Every case of `make bench` runs, at a tiny scale, so a change that breaks
// one is found by `make test` rather than half way through a benchmark. It
// runs in a database of its own: the bench's schemas have fixed names.
// Under the race detector, the cases raceLeftOut selects are left out:
// TestCasesLeftOutUnderRaceRunAtTinyScale runs them without it.
func TestEveryCaseRunsAtTinyScale(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every bench case: not in -short")
	}
	ctx := context.Background()
	cfg := tinyConfig(t)
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	requireFigures(t, rep)
	scenarios := map[string]bool{}
	for _, r := range rep.Results {
		scenarios[r.Scenario] = true
	}
	if cfg.PoolerURL != "" {
		polled := 0
		for _, r := range rep.Results {
			if r.Scenario == "pooler" && strings.HasSuffix(r.Setting, ", poll-only") {
				polled++
				require.Len(t, r.Systems, 3, "%s: poll-only, PgBouncer with a direct LISTEN, direct", r.Setting)
			}
		}
		require.Equal(t, 2, polled, "the poll-only latency cases: inbox, and outbox to inbox")
	}
	for s := range describe {
		if s == "sweep" {
			require.NotEmpty(t, rep.Sweep, "the sweep measured nothing")
			continue
		}
		if s == "pooler" && cfg.PoolerURL == "" {
			continue
		}
		require.True(t, scenarios[s], "scenario %s measured nothing", s)
	}
}

// The cases left out under the race detector run at a tiny scale without
// it: make test runs this test again in a build without -race.
func TestCasesLeftOutUnderRaceRunAtTinyScale(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector is on: these cases race in a library (raceLeftOut); make test runs them without -race")
	}
	if testing.Short() {
		t.Skip("runs bench cases: not in -short")
	}
	if os.Getenv("NATS_URL") == "" {
		t.Skip("NATS_URL is unset: the cases left out under -race are NATS JetStream's (make test sets it)")
	}
	cfg := tinyConfig(t)
	cfg.Only = raceLeftOut.Only
	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Len(t, rep.Results, len(raceLeftOut.Only), "one result for each case of %v", raceLeftOut.Only)
	requireFigures(t, rep)
}

// requireFigures fails the test unless every system of every result has
// runs of its main figure.
func requireFigures(t *testing.T, rep *Report) {
	t.Helper()
	for _, r := range rep.Results {
		for _, s := range r.Systems {
			require.NotEmpty(t, s.Figures[r.Unit].Runs, "%s %s, %s: no %s", r.Scenario, r.Setting, s.System, r.Unit)
		}
	}
}

// tinyConfig is a Config for every case at a tiny scale, in a database of
// the test's own, and through PGBOUNCER_URL's pooler when it is set.
func tinyConfig(t *testing.T) Config {
	t.Helper()
	dbURL := ownDatabase(t)
	cfg := Config{
		URL: dbURL, NATSURL: os.Getenv("NATS_URL"), Runs: 1,
		Backlog: 400, MemoryBacklog: 4000, SweepBacklog: 200, SweepWorkers: []int{1}, OperatorRows: 14_000, OperatorDeadRows: 3000,
		RetainedRows: []int{14_000}, RetainedRandomRows: []int{20_000}, RetainedDatedRows: []int{14_000},
		Duration: 300 * time.Millisecond, Rate: 200, Smoke: true,
	}
	if pooler := os.Getenv("PGBOUNCER_URL"); pooler != "" {
		u, err := url.Parse(pooler)
		require.NoError(t, err)
		u.Path = "/" + databaseOf(t, dbURL)
		cfg.PoolerURL = u.String()
	}
	return cfg
}

// -only keeps whole scenarios, or a scenario's cases by a word of their
// setting, so that one case can run alone.
func TestOnlyKeepsScenariosOrCasesByAWord(t *testing.T) {
	t.Parallel()
	cases := []benchCase{
		{scenario: "pooler", setting: "latency, inbox, 50/s, poll-only"},
		{scenario: "pooler", setting: "drain 200000 messages"},
		{scenario: "relay", setting: "50000 rows → GoChannel"},
	}
	for _, tc := range []struct {
		only []string
		want []bool
	}{
		{nil, []bool{true, true, true}},
		{[]string{"pooler"}, []bool{true, true, false}},
		{[]string{"pooler/poll-only"}, []bool{true, false, false}},
		{[]string{"relay", "pooler/poll-only"}, []bool{true, false, true}},
		{[]string{"latency/poll-only"}, []bool{false, false, false}},
	} {
		var got []bool
		for _, c := range cases {
			got = append(got, Config{Only: tc.only}.selects(c))
		}
		require.Equal(t, tc.want, got, "-only %v", tc.only)
	}
}

// ownDatabase creates a database for the test, dropped when it ends, and
// returns its URL.
func ownDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin := pgtest.Pool(t)
	name := "bench_" + pgtest.EmptySchema(t) // a name no other test holds
	_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	})
	u, err := url.Parse(pgtest.DirectURL(t))
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

func databaseOf(t *testing.T, dbURL string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	return cfg.Database
}
