package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/migrations"
)

const backlogSchema = "chaos_backlog"

// drain runs a dispatcher over the backlog with a no-op in-transaction
// handler, printing its resident memory every 50ms, until the backlog is
// gone (counted every 250ms: a count of a large backlog is no free query).
func drain(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	in, err := inbox.New(pool, inbox.Config{Consumer: "drain", Schema: backlogSchema})
	require.NoError(t, err)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Inbox:   in,
		Workers: 4, BatchSize: 32, PollInterval: 50 * time.Millisecond,
		Handlers: map[string]dispatcher.Handler{"E": dispatcher.InTx(func(context.Context, pgx.Tx, *dispatcher.Message) error { return nil })},
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	left := ident.Render("SELECT count(*) FROM /* schema */inbox WHERE status <> 'done'", backlogSchema)
	for i := 1; ; i++ {
		time.Sleep(50 * time.Millisecond)
		fmt.Printf("rss %d\n", rss(t))
		if i%5 != 0 {
			continue
		}
		var n int
		require.NoError(t, pool.QueryRow(ctx, left).Scan(&n))
		if n == 0 {
			break
		}
	}
	require.NoError(t, d.Stop(ctx))
	fmt.Println("drained")
}

// rss is this process's resident memory in kB, from /proc.
func rss(t *testing.T) int {
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, err := strconv.Atoi(strings.Fields(line)[1])
			require.NoError(t, err)
			return kb
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// A dispatcher drains a large backlog with flat memory: it holds one
// batch per worker, never the backlog.
func TestChaosBacklogDrainsWithFlatMemory(t *testing.T) {
	cl := startCluster(t)
	pool := cl.pool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident.Quote(backlogSchema)+" CASCADE")
	require.NoError(t, err)
	require.NoError(t, migrations.Migrate(ctx, pool, migrations.Options{Schema: backlogSchema}))
	_, err = pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, max_attempts, payload_hash, payload, bucket)
		SELECT 'drain', 'm-' || i, 'E', 5, '\x00', convert_to(repeat('x', 200), 'UTF8'), /* schema */inbox_bucket('m-' || i)
		FROM generate_series(1, $1) AS i`, backlogSchema), *flagBacklog)
	require.NoError(t, err)

	child := pgtest.StartChild(t, "TestChildProcess", "drain", "DATABASE_URL="+cl.url)
	started := time.Now()
	var samples []int
	for {
		line, ok := child.Line(10 * time.Minute)
		require.True(t, ok, "drain process ended: %s", child.Stderr())
		if line == "drained" {
			break
		}
		var kb int
		if _, err := fmt.Sscanf(line, "rss %d", &kb); err == nil {
			samples = append(samples, kb)
		}
	}
	elapsed := time.Since(started)
	require.GreaterOrEqual(t, len(samples), 4, "too few samples to judge")
	// Judge after the first quarter (start-up, pools filling): the later
	// half must not have grown past the earlier half.
	warm := samples[len(samples)/4:]
	early, late := warm[:len(warm)/2], warm[len(warm)/2:]
	report := fmt.Sprintf("### Backlog drain: %d messages\n\nDrained in %s (%.0f messages/s) by one process with 4 workers. "+
		"Resident memory after warm-up: min %d kB, max %d kB; earlier half peaked at %d kB, later half at %d kB.\n",
		*flagBacklog, elapsed.Round(time.Second), float64(*flagBacklog)/elapsed.Seconds(),
		slices.Min(warm), slices.Max(warm), slices.Max(early), slices.Max(late))
	fmt.Println(report)
	if *flagReport != "" {
		appendReport(t, *flagReport, report)
	}
	require.LessOrEqual(t, float64(slices.Max(late)), 1.10*float64(slices.Max(early)),
		"memory grew while draining: %v", samples)
}
