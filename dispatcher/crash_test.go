package dispatcher_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
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
)

// Lease settings for crash tests: short, so that a killed worker's
// messages come back quickly.
const (
	crashHandlerTimeout = 300 * time.Millisecond
	crashLease          = 600 * time.Millisecond
)

// TestChildProcess is not a test: it is the body of the child processes
// the crash tests start (pgtest.StartChild) and kill. It runs a dispatcher
// in the role the parent chose until it is killed.
func TestChildProcess(t *testing.T) {
	role := pgtest.ChildRole()
	if role == "" {
		t.Skip("the body of child processes started by other tests")
	}
	ctx := context.Background()
	schema := os.Getenv("PGBOX_TEST_SCHEMA")
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	require.NoError(t, err)
	cfg.MaxConns = 16 // each of the 4 workers holds one for its batch; handlers need more
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	sql := func(q string) string { return ident.Render(q, schema) }

	handlers := map[string]dispatcher.Handler{
		// In the transaction: the effect commits with the done mark or not at all.
		"InTx": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if _, err := tx.Exec(ctx, sql("INSERT INTO /* schema */effects (message_id, attempt, proc) VALUES ($1, $2, 'child')"), m.ID, m.Attempt); err != nil {
				return err
			}
			fmt.Println("handling", m.ID) // the parent kills us right after reading this
			time.Sleep(3 * time.Millisecond)
			return nil
		}),
		// Outside the transaction: the "external call" commits on its own,
		// before the done mark.
		"Leased": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
			if _, err := pool.Exec(ctx, sql("INSERT INTO /* schema */effects (message_id, attempt, note, proc) VALUES ($1, $2, $3, 'child')"), m.ID, m.Attempt, m.IdempotencyKey()); err != nil {
				return err
			}
			fmt.Println("called", m.ID)
			time.Sleep(20 * time.Millisecond)
			return nil
		}),
		// A message that takes its whole process down, as an os.Exit, an
		// OOM kill or a panic in a stray goroutine would.
		"Crash": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if m.ID == "poison" {
				fmt.Println("crashing")
				os.Exit(3)
			}
			_, err := tx.Exec(ctx, sql("INSERT INTO /* schema */effects (message_id, attempt, proc) VALUES ($1, $2, 'child')"), m.ID, m.Attempt)
			return err
		}),
		"Ordered": orderedHandler(pool, schema, "child"),
	}
	in, err := inbox.New(pool, inbox.Config{Consumer: consumer, Schema: schema})
	if err != nil {
		panic(err)
	}
	d, err := dispatcher.New(pool, dispatcher.Config{
		Inbox:          in,
		BatchSize:      8,
		HandlerTimeout: crashHandlerTimeout,
		Handlers:       handlers,
		Lease:          crashLease,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PollInterval:   20 * time.Millisecond,
		RetryBackoffFunc: func(int) time.Duration {
			return 10 * time.Millisecond
		},
		Workers: 4,
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	fmt.Println("ready")
	select {} // until killed
}

// orderedHandler records each keyed message it handles, and any moment
// the key's order or one-at-a-time rule was broken. The check reads the
// inbox through another connection, which sees committed state only: when
// message i of a key runs, every earlier message of the key must be done and
// every later one still pending. (An advisory lock cannot check this:
// PostgreSQL makes a commit visible a moment before it releases the
// transaction's locks.) One message in seven fails its first attempt, so
// heads retry.
func orderedHandler(pool *pgxpool.Pool, schema, proc string) dispatcher.Handler {
	sql := func(q string) string { return ident.Render(q, schema) }
	return dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
		if m.OrderingKey != "" { // unkeyed messages may run in any order, in parallel
			var earlierNotDone, laterStarted int
			err := pool.QueryRow(ctx, sql(`
				SELECT count(*) FILTER (WHERE k.seq < me.seq AND k.status <> 'done'),
				       count(*) FILTER (WHERE k.seq > me.seq AND k.status <> 'pending')
				FROM /* schema */inbox AS k,
				     (SELECT seq FROM /* schema */inbox WHERE consumer = $1 AND message_id = $2) AS me
				WHERE k.consumer = $1 AND k.ordering_key = $3`), m.Consumer, m.ID, m.OrderingKey).Scan(&earlierNotDone, &laterStarted)
			if err != nil {
				return err
			}
			if earlierNotDone > 0 || laterStarted > 0 {
				if _, err := pool.Exec(ctx, sql("INSERT INTO /* schema */violations VALUES ($1, $2)"), m.OrderingKey, m.ID); err != nil {
					return err
				}
			}
		}
		h := fnv.New32a()
		_, _ = h.Write([]byte(m.ID))
		if h.Sum32()%7 == 0 && m.Attempt == 1 {
			return fmt.Errorf("transient failure of %s", m.ID)
		}
		time.Sleep(time.Duration(rand.N(1500)) * time.Microsecond)
		_, err := tx.Exec(ctx, sql("INSERT INTO /* schema */effects (message_id, attempt, note, proc) VALUES ($1, $2, $3, $4)"),
			m.ID, m.Attempt, m.OrderingKey, proc)
		return err
	})
}

// crashSetup is setup plus what the child processes write.
func crashSetup(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t)
	b.exec(t, "ALTER TABLE /* schema */effects ADD COLUMN proc text")
	b.exec(t, "CREATE TABLE /* schema */violations (ordering_key text, message_id text)")
	return b
}

func (b *testBundle) startChild(t *testing.T) *pgtest.Child {
	t.Helper()
	child := pgtest.StartChild(t, "TestChildProcess", "dispatcher", "PGBOX_TEST_SCHEMA="+b.schema)
	waitLine(t, child, "ready")
	return child
}

// waitLine reads the child's output until a line starting with prefix.
func waitLine(t *testing.T, child *pgtest.Child, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		line, ok := child.Line(time.Until(deadline))
		if !ok {
			t.Fatalf("child ended before printing %q; stderr:\n%s", prefix, child.Stderr())
		}
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("child did not print %q in time", prefix)
	return ""
}

// rescue starts an in-process dispatcher with the same lease settings as
// the children, to finish what a killed child left.
func (b *testBundle) rescue(t *testing.T, handlers map[string]dispatcher.Handler) {
	t.Helper()
	b.start(t, dispatcher.Config{
		BatchSize:      8,
		HandlerTimeout: crashHandlerTimeout,
		Handlers:       handlers,
		Lease:          crashLease,
		Workers:        4,
	})
	b.waitSettled(t)
}

// A child is SIGKILLed in the middle of in-transaction handling; a fresh
// dispatcher finishes the work. Every message's effect happens exactly
// once: the killed transaction's writes died with it.
func TestSIGKILLDuringInTxHandlingLosesAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	b := crashSetup(t)
	all := ids("m", 300)
	b.receiveAs(t, "InTx", all...)

	child := b.startChild(t)
	for range 60 {
		waitLine(t, child, "handling ")
	}
	child.Kill() // inside a handler: it just printed
	var lost int
	b.scalar(t, &lost, "SELECT count(*) FROM /* schema */inbox_claims WHERE pg_xact_status(xid) <> 'committed'")
	require.Positive(t, lost, "the kill must leave a claimed batch behind, or this test proves nothing")

	b.rescue(t, map[string]dispatcher.Handler{"InTx": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
		_, err := tx.Exec(ctx, b.sql("INSERT INTO /* schema */effects (message_id, attempt, proc) VALUES ($1, $2, 'rescuer')"), m.ID, m.Attempt)
		return err
	})})

	effects := b.effects(t)
	require.Len(t, effects, len(all))
	for _, id := range all {
		require.Equal(t, 1, effects[id], "effect of %s", id)
		require.Equal(t, "done", b.row(t, id).Status)
	}
	var recovered int
	b.scalar(t, &recovered, `SELECT count(*) FROM /* schema */inbox
		WHERE attempts = 2 AND errors->0->>'error' LIKE '%batch transaction never committed%'`)
	require.Positive(t, recovered, "messages in flight at the kill have their lost attempt counted and are retried")
	b.scalar(t, &lost, "SELECT count(*) FROM /* schema */inbox_claims WHERE pg_xact_status(xid) = 'aborted'")
	require.Zero(t, lost, "every lost batch is reconciled")
}

// A child is SIGKILLed after a leased handler's outside call and before
// its done mark. The call is made again (at least once, never lost), with
// the same idempotency key, so the outside system can recognise it.
func TestSIGKILLDuringLeasedHandlingLosesNothing(t *testing.T) {
	t.Parallel()
	b := crashSetup(t)
	all := ids("m", 100)
	b.receiveAs(t, "Leased", all...)

	child := b.startChild(t)
	for range 20 {
		waitLine(t, child, "called ")
	}
	child.Kill() // after a call, during its 20ms before the done mark

	b.rescue(t, map[string]dispatcher.Handler{"Leased": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
		_, err := b.pool.Exec(ctx, b.sql("INSERT INTO /* schema */effects (message_id, attempt, note, proc) VALUES ($1, $2, $3, 'rescuer')"),
			m.ID, m.Attempt, m.IdempotencyKey())
		return err
	})})

	effects := b.effects(t)
	repeated := 0
	for _, id := range all {
		require.GreaterOrEqual(t, effects[id], 1, "%s was never called: lost", id)
		if effects[id] > 1 {
			repeated++
		}
		require.Equal(t, "done", b.row(t, id).Status)
	}
	require.Positive(t, repeated, "the call cut off by the kill must be made again")
	var keysPerMessage int
	b.scalar(t, &keysPerMessage, "SELECT max(n) FROM (SELECT count(DISTINCT note) AS n FROM /* schema */effects GROUP BY message_id) k")
	require.Equal(t, 1, keysPerMessage, "every call for a message must carry the same idempotency key")
}

// A message that kills its process every time it is handled uses up its
// attempts, one per crash, and ends dead. The messages claimed in its batch
// die with the process once, are then rescued one at a time, and are done:
// with as few attempts as the poison, they must not share its fate.
func TestMessageThatCrashesItsProcessEndsDead(t *testing.T) {
	t.Parallel()
	b := crashSetup(t)
	b.receiveMsgs(t, inbox.Message{ID: "poison", EventType: "Crash", MaxAttempts: 3})
	good := ids("good", 10)
	for _, id := range good {
		b.receiveMsgs(t, inbox.Message{ID: id, EventType: "Crash", MaxAttempts: 3})
	}

	crashes := 0
	for range 8 {
		var status string
		b.scalar(t, &status, "SELECT status FROM /* schema */inbox WHERE message_id = 'poison'")
		if status == "dead" {
			break
		}
		child := b.startChild(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for ctx.Err() == nil {
			// Either the child crashes on the poison message or, once it
			// is dead, keeps running: poll for both.
			waitCtx, waitCancel := context.WithTimeout(ctx, 20*time.Millisecond)
			err := child.Wait(waitCtx)
			waitCancel()
			if err != nil && !strings.Contains(err.Error(), "deadline") {
				require.Contains(t, err.Error(), "exit status 3")
				crashes++
				break
			}
			b.scalar(t, &status, "SELECT status FROM /* schema */inbox WHERE message_id = 'poison'")
			if status == "dead" {
				// The messages whose batch died with the poison are still
				// to be handled: this child lives on to handle them.
				b.waitSettled(t)
				break
			}
		}
		cancel()
		child.Kill()
	}

	require.Equal(t, 3, crashes, "one crash per attempt")
	r := b.row(t, "poison")
	require.Equal(t, "dead", r.Status)
	require.Equal(t, 3, r.Attempts)
	require.Len(t, r.Errors, 3)
	for i, e := range r.Errors {
		require.Equal(t, i+1, e.Attempt)
		require.Contains(t, e.Error, "batch transaction never committed")
	}
	effects := b.effects(t)
	for _, id := range good {
		require.Equal(t, 1, effects[id], id)
		require.Equal(t, "done", b.row(t, id).Status, id)
	}
}

// Eight workers in two processes handle 16 ordering keys: each key's
// messages run one at a time, in arrival order, retries included.
func TestPerKeyOrderAcrossTwoProcesses(t *testing.T) {
	t.Parallel()
	b := crashSetup(t)
	const keys, perKey = 16, 25
	var msgs []inbox.Message
	for i := range perKey {
		for k := range keys {
			msgs = append(msgs, inbox.Message{ID: fmt.Sprintf("k%02d-%02d", k, i), EventType: "Ordered", OrderingKey: fmt.Sprintf("k%02d", k)})
		}
	}
	for i := range 50 {
		msgs = append(msgs, inbox.Message{ID: fmt.Sprintf("free-%02d", i), EventType: "Ordered"})
	}
	rand.Shuffle(len(msgs), func(i, j int) {
		// Keep each key's own order; mix everything else.
		if msgs[i].OrderingKey == "" || msgs[j].OrderingKey == "" || msgs[i].OrderingKey != msgs[j].OrderingKey {
			msgs[i], msgs[j] = msgs[j], msgs[i]
		}
	})
	// The shuffle may reorder a key's messages through a third element:
	// restore per-key order in place, which leaves keys interleaved.
	next := map[string]int{}
	for i := range msgs {
		if key := msgs[i].OrderingKey; key != "" {
			msgs[i].ID = fmt.Sprintf("%s-%02d", key, next[key])
			next[key]++
		}
	}

	b.startChild(t)
	b.start(t, dispatcher.Config{
		BatchSize:      8,
		HandlerTimeout: crashHandlerTimeout,
		Handlers:       map[string]dispatcher.Handler{"Ordered": orderedHandler(b.pool, b.schema, "parent")},
		Lease:          crashLease,
		Workers:        4,
	})
	for chunk := range 10 {
		part := msgs[chunk*len(msgs)/10 : (chunk+1)*len(msgs)/10]
		b.receiveMsgs(t, part...)
	}
	b.waitSettled(t)

	var violations int
	b.scalar(t, &violations, "SELECT count(*) FROM /* schema */violations")
	require.Zero(t, violations, "a keyed message ran before an earlier one was done, or after a later one started")

	rows, err := b.pool.Query(context.Background(), b.sql("SELECT note, message_id FROM /* schema */effects WHERE note <> '' ORDER BY seq"))
	require.NoError(t, err)
	seen := map[string][]string{}
	for rows.Next() {
		var key, id string
		require.NoError(t, rows.Scan(&key, &id))
		seen[key] = append(seen[key], id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, seen, keys)
	for key, got := range seen {
		want := make([]string, perKey)
		for i := range want {
			want[i] = fmt.Sprintf("%s-%02d", key, i)
		}
		require.Equal(t, want, got, "key %s out of order", key)
	}

	var procs int
	b.scalar(t, &procs, "SELECT count(DISTINCT proc) FROM /* schema */effects")
	require.Equal(t, 2, procs, "both processes must have handled messages, or this test proves nothing")
	var retried int
	b.scalar(t, &retried, "SELECT count(*) FROM /* schema */inbox WHERE attempts > 1 AND ordering_key IS NOT NULL")
	require.Positive(t, retried, "some heads must have retried")
}
