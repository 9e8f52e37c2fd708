package test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/relay"
)

// childLease is the relay lease in child processes: short, so that a
// killed relay's rows come back quickly.
const childLease = time.Second

// dieMaxAttempts is the relay's Config.MaxAttempts in "relay-die" children.
const dieMaxAttempts = 3

// TestChildProcess is not a test: it is the body of the relay processes
// the tests below start and kill (pgtest.StartChild).
//
//   - "relay": a relay that says "publishing" on its first publish;
//   - "relay-pause": a relay that, after its first successful publish,
//     says "published", the messages' count and the ids it published (the
//     rows it claimed), and freezes
//     (freeze: SIGSTOP) before recording it, to be killed. It freezes
//     rather than sleeps in Publish: the relay would give up a publish
//     that does not return and record its rows. Its statements on the
//     outbox go to stderr as they start and end (outboxTrace);
//   - "relay-die": a relay whose first publish SIGKILLs its own process,
//     with MaxAttempts dieMaxAttempts.
//
// Its sessions carry the application_name in PGBOX_CHILD_APP, for the
// parent to find them in pg_stat_activity.
func TestChildProcess(t *testing.T) {
	role := pgtest.ChildRole()
	if role == "" {
		t.Skip("the body of child processes started by other tests")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = os.Getenv("PGBOX_CHILD_APP")
	if role == "relay-pause" {
		cfg.ConnConfig.Tracer = outboxTrace{}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)

	b := sqlBroker(t, pool, os.Getenv("PGBOX_BROKER_SCHEMA"))
	var once sync.Once
	pub := publishFunc(func(topic string, msgs ...*message.Message) error {
		switch role {
		case "relay":
			once.Do(func() { fmt.Println("publishing") })
		case "relay-die":
			// The row kills its relay, as soon as it is published.
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		if err := b.publisher.Publish(topic, msgs...); err != nil {
			return err
		}
		if role == "relay-pause" {
			ids := make([]string, len(msgs))
			for i, m := range msgs {
				ids[i] = m.UUID
			}
			fmt.Printf("published %d ids=%s\n", len(msgs), strings.Join(ids, ","))
			// Killed here, frozen: published, not yet recorded.
			require.NoError(t, freeze())
		}
		return nil
	})
	workers, maxAttempts := 2, 0
	switch role {
	case "relay-pause":
		workers = 1 // exactly one batch is published and left unrecorded
	case "relay-die":
		workers, maxAttempts = 1, dieMaxAttempts
	}
	r, err := relay.New(pool, relay.Config{
		// watermill-sql takes a batch in one INSERT: one call publishes
		// the 10 rows the test expects to be published and unrecorded.
		AtomicPublisher: true,
		BatchSize:       10,
		Lease:           childLease,
		MaxAttempts:     maxAttempts,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PollInterval:    20 * time.Millisecond,
		Publisher:       pub,
		Schema:          os.Getenv("PGBOX_TEST_SCHEMA"),
		Workers:         workers,
	})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	fmt.Println("ready")
	select {} // until killed
}

// publishFunc adapts a function to a Watermill publisher.
type publishFunc func(topic string, msgs ...*message.Message) error

func (f publishFunc) Publish(topic string, msgs ...*message.Message) error { return f(topic, msgs...) }
func (f publishFunc) Close() error                                         { return nil }

// outboxTrace is a pgx tracer that writes to stderr, with the time, each
// statement on the outbox a relay child makes (its arguments as it starts,
// its command tag or error as it ends). It tells what the child did to its
// rows before it was killed.
type outboxTrace struct{}

type outboxTraceKey struct{}

func (outboxTrace) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(data.SQL, "outbox") {
		return ctx
	}
	kind := "statement"
	switch {
	case strings.Contains(data.SQL, "INSERT INTO") && strings.Contains(data.SQL, "outbox_claims"):
		kind = "record claim"
	case strings.Contains(data.SQL, "SKIP LOCKED"):
		kind = "claim"
	case strings.Contains(data.SQL, "unnest("):
		kind = "complete"
	}
	fmt.Fprintf(os.Stderr, "%s trace: %s start args=%v\n", time.Now().Format("15:04:05.000000"), kind, data.Args)
	return context.WithValue(ctx, outboxTraceKey{}, kind)
}

func (outboxTrace) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	kind, ok := ctx.Value(outboxTraceKey{}).(string)
	if !ok {
		return
	}
	fmt.Fprintf(os.Stderr, "%s trace: %s end tag=%q err=%v\n", time.Now().Format("15:04:05.000000"), kind, data.CommandTag.String(), data.Err)
}

// childApp is the application_name of a relay child's sessions.
func childApp(p *producer) string { return "pgbox test child " + p.schema }

func startRelayChild(t *testing.T, role string, p *producer, brokerSchema string) *pgtest.Child {
	t.Helper()
	child := pgtest.StartChild(t, "TestChildProcess", role, "PGBOX_TEST_SCHEMA="+p.schema, "PGBOX_BROKER_SCHEMA="+brokerSchema,
		"PGBOX_CHILD_APP="+childApp(p))
	readLine(t, child, "ready")
	return child
}

// readLine reads the child's next line, requires that it contain want, and
// returns it.
func readLine(t *testing.T, child *pgtest.Child, want string) string {
	t.Helper()
	line, ok := child.Line(60 * time.Second)
	require.True(t, ok, "child ended or fell silent before saying %q; stderr:\n%s", want, child.Stderr())
	require.Contains(t, line, want)
	return line
}

// crashScene is what the database shows of a relay child at one moment:
// the outbox's rows, the processes table, and the sessions that carry the
// child's application_name (through a transaction pooler, the server
// sessions last linked to the child's connections).
type crashScene struct {
	claimed  []string // ids named by claim records
	outbox   string
	process  string
	sessions string
}

func sceneOf(t *testing.T, p *producer) crashScene {
	t.Helper()
	ctx := context.Background()
	var sc crashScene
	require.NoError(t, p.pool.QueryRow(ctx, ident.Render(`
		SELECT (SELECT coalesce(array_agg(id::text ORDER BY id), '{}') FROM /* schema */outbox_claims, unnest(ids) AS id),
		       string_agg(format('%s %s attempts=%s available_at=%s error=%s', id, status, attempts, available_at, last_error), E'\n' ORDER BY seq)
		FROM /* schema */outbox`, p.schema)).Scan(&sc.claimed, &sc.outbox))
	require.NoError(t, p.pool.QueryRow(ctx, ident.Render(`
		SELECT coalesce(string_agg(format('id=%s (tokens from %s) name=%s pid=%s started_at=%s last_seen_at=%s', id, id::bigint << 32, name, pid, started_at, last_seen_at), E'\n'), '')
		FROM /* schema */processes`, p.schema)).Scan(&sc.process))
	require.NoError(t, p.pool.QueryRow(ctx, `
		SELECT coalesce(string_agg(format('pid=%s state=%s xid=%s xact_start=%s state_change=%s wait=%s/%s query=%s',
		           pid, state, backend_xid, xact_start, state_change, wait_event_type, wait_event, left(regexp_replace(query, '\s+', ' ', 'g'), 160)), E'\n' ORDER BY pid), '')
		FROM pg_catalog.pg_stat_activity WHERE application_name = $1`, childApp(p)).Scan(&sc.sessions))
	return sc
}

func (sc crashScene) String() string {
	return "outbox:\n" + sc.outbox + "\nprocesses:\n" + sc.process + "\nsessions:\n" + sc.sessions
}

// A relay is SIGKILLed after its publish reached the broker and before it
// recorded it. Its batch transaction dies with it, and the rows, pending
// all along, are free at once; its claim record outlives it. Another relay
// counts the lost attempt and publishes the rows again; the consumer's
// inbox dedupes them, so each order is paid once.
func TestRelayKilledBetweenPublishAndMarkCausesNoDoubleEffect(t *testing.T) {
	t.Parallel()
	p := newProducer(t, "orders")
	b := sqlBroker(t, p.pool, p.schema)
	c := startConsumer(t, b)
	for i := range 30 {
		p.place(t, order{ID: orderID(i), Cents: i}, "", true)
	}

	child := startRelayChild(t, "relay-pause", p, p.schema)
	published := readLine(t, child, "published 10 ")
	before := sceneOf(t, p)
	child.Kill()
	// Its claim record was sent before it published, and the server
	// commits it whatever became of the child: it may still be on its way.
	var after crashScene
	require.Eventually(t, func() bool { after = sceneOf(t, p); return len(after.claimed) > 0 }, 10*time.Second, time.Millisecond,
		"no claim record of the killed relay's batch")

	// The rows the child published are those it claimed, and it was
	// killed before it recorded them: its claim record names them.
	_, ids, ok := strings.Cut(published, " ids=")
	require.True(t, ok, published)
	require.ElementsMatch(t, strings.Split(ids, ","), after.claimed,
		"the killed relay published 10 rows without recording them, so its claim record must name them.\nThe child said: %s\n"+
			"Before the kill:\n%s\nAfter the kill:\n%s\nThe child's stderr:\n%s", published, before, after, child.Stderr())

	p.startRelay(t, b.publisher)
	waitPublished(t, p)
	c.waitSettled(t, 2*(30+10), 30)

	var deliveries, distinct int
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
		`SELECT count(*), count(DISTINCT uuid) FROM /* schema */"watermill_orders"`, p.schema)).Scan(&deliveries, &distinct))
	require.Equal(t, 40, deliveries, "the 10 rows were published twice")
	require.Equal(t, 30, distinct)
	var lost int
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
		`SELECT count(*) FROM /* schema */outbox WHERE attempts = 2 AND last_error LIKE '%never committed%' AND id::text = ANY($1)`, p.schema),
		strings.Split(ids, ",")).Scan(&lost))
	require.Equal(t, 10, lost, "each of the 10 rows has its lost attempt counted:\n%s", sceneOf(t, p))
	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, 30)
	for i := range 30 {
		require.Equal(t, 1, payments[orderID(i)], orderID(i))
	}
}

// A row whose publish kills its relay, every time, ends dead after
// MaxAttempts relays died on it, instead of crash-looping: each relay,
// SIGKILLed as it publishes, has sent its claim record before and never
// reads the answer, and the next relay counts the lost attempt before it
// publishes the row again.
func TestARowThatKillsItsRelayEndsDead(t *testing.T) {
	t.Parallel()
	p := newProducer(t, "orders")
	id := p.place(t, order{ID: orderID(0), Cents: 1}, "", true)
	status := func() (status string, attempts int, errs int) {
		require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
			`SELECT status, attempts, jsonb_array_length(errors) FROM /* schema */outbox WHERE id = $1`, p.schema), id).Scan(&status, &attempts, &errs))
		return status, attempts, errs
	}
	dead := func() bool { s, _, _ := status(); return s == "dead" }
	died := 0
	for !dead() {
		// A record counted late (still on its way when the next relay
		// looked) costs a life more, never the count.
		require.Less(t, died, 2*dieMaxAttempts, "the row still kills its relays after %d died publishing it:\n%s", died, sceneOf(t, p))
		child := pgtest.StartChild(t, "TestChildProcess", "relay-die", "PGBOX_TEST_SCHEMA="+p.schema, "PGBOX_BROKER_SCHEMA="+p.schema,
			"PGBOX_CHILD_APP="+childApp(p))
		// It dies publishing the row, or finds it dead and lives on.
		require.Eventually(t, func() bool { return child.Exited() || dead() }, time.Minute, 5*time.Millisecond,
			"the relay neither published the row nor counted it dead:\n%s\nIts stderr:\n%s", sceneOf(t, p), child.Stderr())
		if child.Exited() {
			err := child.Wait(context.Background())
			require.ErrorContains(t, err, "signal: killed", "the relay ended otherwise than killed publishing the row; its stderr:\n%s", child.Stderr())
			died++
		}
		child.Kill()
	}
	s, attempts, errs := status()
	require.Equal(t, "dead", s)
	require.Equal(t, dieMaxAttempts, attempts, "each relay that died publishing the row counted one attempt:\n%s", sceneOf(t, p))
	require.Equal(t, dieMaxAttempts, errs, "each lost attempt is in the row's history")
	require.GreaterOrEqual(t, died, dieMaxAttempts)
	t.Logf("%d relays died publishing the row", died)
}

// Three relay processes publish rows of many ordering keys, written by
// several producers at once: the consumer sees each key in the order its
// transactions committed.
func TestThreeRelayProcessesKeepPerKeyCommitOrder(t *testing.T) {
	t.Parallel()
	p := newProducer(t, "orders")
	b := sqlBroker(t, p.pool, p.schema)
	c := startConsumer(t, b)
	children := make([]*pgtest.Child, 3)
	for i := range children {
		children[i] = startRelayChild(t, "relay", p, p.schema)
	}

	const keys, writers, perWriter = 12, 4, 60
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				n := w*perWriter + i
				p.place(t, order{ID: orderID(n), Cents: n}, fmt.Sprintf("customer-%02d", n%keys), true)
			}
		})
	}
	wg.Wait()
	waitPublished(t, p)
	c.waitSettled(t, 2*writers*perWriter, writers*perWriter)
	for _, child := range children {
		readLine(t, child, "publishing") // every relay process took part
	}

	// Commit order per key is the outbox's seq order (writers of a key take
	// turns until commit); the consumer's order is its payments' order.
	produced := idsByKey(t, p.pool, ident.Render("SELECT ordering_key, id::text FROM /* schema */outbox ORDER BY seq", p.schema))
	consumed := idsByKey(t, c.pool, c.sql("SELECT ordering_key, message_id FROM /* schema */payments ORDER BY seq"))
	require.Len(t, produced, keys)
	require.Equal(t, produced, consumed)
}

func idsByKey(t *testing.T, pool *pgxpool.Pool, query string) map[string][]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), query)
	require.NoError(t, err)
	out := map[string][]string{}
	for rows.Next() {
		var key, id string
		require.NoError(t, rows.Scan(&key, &id))
		out[key] = append(out[key], id)
	}
	require.NoError(t, rows.Err())
	return out
}
