package idempotency_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/idempotency"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Lease settings for the crash tests: short, so that a dead or stalled
// request's key comes back quickly, and long enough that a retry sent right
// away still finds the lease held.
var crashConfig = idempotency.Config{HandlerTimeout: 500 * time.Millisecond, Lease: time.Second}

// retryUntilTakenOver sends req until it is answered with something other
// than 409, as a client honouring Retry-After would, and returns that answer.
func retryUntilTakenOver(t *testing.T, h http.Handler, req request) reply {
	t.Helper()
	var got reply
	require.Eventually(t, func() bool {
		got = send(h, req)
		return got.Status != http.StatusConflict
	}, 20*time.Second, 20*time.Millisecond, "the key was never taken over")
	return got
}

// stallUntil returns a channel for a stalled handler to wait on, and the
// function that frees it: called by the test, and at the latest when the
// test ends, so that a failing test ends instead of hanging.
func stallUntil(t *testing.T) (stall <-chan struct{}, free func()) {
	ch := make(chan struct{})
	var once sync.Once
	free = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(free)
	return ch, free
}

// requireConflictWhileLeased sends req, whose key's first request holds
// the lease, and requires a 409. On a machine so loaded that the lease ran
// out before the answer, a takeover is right too, and the check is skipped:
// it is made only when, after the answer, the first request still holds an
// unexpired lease, which it then held when the request looked.
func (b *testBundle) requireConflictWhileLeased(t *testing.T, h http.Handler, req request) {
	t.Helper()
	got := send(h, req)
	var held bool
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(`
		SELECT state = 'in_progress' AND attempts = 1 AND locked_until > now()
		FROM /* schema */idempotency_keys WHERE key = $1`), req.key).Scan(&held))
	if !held {
		t.Logf("the lease ran out before the duplicate was answered (%d): not checking for 409", got.Status)
		return
	}
	require.Equal(t, http.StatusConflict, got.Status, "within the lease, a duplicate is answered 409: %s", got.Body)
}

// logBuffer collects a Middleware's logs for a test to read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{mu: &l.mu, w: &l.buf}, nil))
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// A request that stalls past its lease (paused, stuck, ignoring its
// context) loses its key: the next retry takes it over and runs the
// handler, and the stalled request can no longer store anything.
func TestStalledRequestLosesItsKeyToARetry(t *testing.T) {
	t.Parallel()
	req := request{target: "/charges", key: "k", body: "b"}

	// With Wrap the stalled handler's effect has happened, so the retry's
	// makes it twice: Wrap is at least once. What is stored, and replayed
	// from then on, is the retry's response.
	t.Run("Wrap", func(t *testing.T) {
		t.Parallel()
		var logs logBuffer
		cfg := crashConfig
		cfg.Logger = logs.logger()
		m, b := setup(t, cfg)
		var runs atomic.Int64
		entered := make(chan struct{})
		stall, free := stallUntil(t)
		h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			if n == 1 {
				close(entered)
				<-stall // ignores its context
			}
			w.Header().Set("Location", fmt.Sprint("/charges/", n))
			w.WriteHeader(http.StatusCreated)
		}))

		var stalled reply
		var wg sync.WaitGroup
		wg.Go(func() { stalled = send(h, req) })
		<-entered
		b.requireConflictWhileLeased(t, h, req)

		retried := retryUntilTakenOver(t, h, req)
		require.Equal(t, http.StatusCreated, retried.Status)
		require.False(t, retried.replayed())
		require.Equal(t, "/charges/2", retried.Header.Get("Location"))
		require.Equal(t, 2, b.row(t, "k").Attempts)

		free()
		wg.Wait()
		require.Equal(t, "/charges/1", stalled.Header.Get("Location"), "the stalled request still answers its client")
		require.Equal(t, "/charges/2", send(h, req).Header.Get("Location"), "but the retry's response is the one stored")
		require.EqualValues(t, 2, runs.Load())
		require.Contains(t, logs.String(), "took over a key whose request never answered")
		require.Contains(t, logs.String(), "the handler outlived its lease and another request took its key over")
	})

	// With WrapTx the stalled request's writes roll back: its fenced store
	// matches nothing. It is busy (waiting on a lock), so the server keeps
	// its session; it answers 409, pointing its client at the retry's
	// response.
	t.Run("WrapTxBusy", func(t *testing.T) {
		t.Parallel()
		m, b := setup(t, crashConfig)
		b.setupCharges(t)
		lockID := rand.Int64()
		// The test's own session lock, on a connection of its own that
		// no pooler shares out.
		holder, err := pgx.Connect(context.Background(), pgtest.DirectURL(t))
		require.NoError(t, err)
		unlock := func() {
			_, err := holder.Exec(context.Background(), "SELECT pg_advisory_unlock_all()")
			require.NoError(t, err)
		}
		t.Cleanup(func() { unlock(); _ = holder.Close(context.Background()) }) // even if the test fails half-way
		_, err = holder.Exec(context.Background(), "SELECT pg_advisory_lock($1)", lockID)
		require.NoError(t, err)

		var runs atomic.Int64
		entered := make(chan struct{})
		h := m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
			n := runs.Add(1)
			if err := b.insertCharge(r.Context(), tx, fmt.Sprint("run ", n)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if n == 1 {
				close(entered)
				// Stuck in a query that ignores the request's deadline.
				if _, err := tx.Exec(context.WithoutCancel(r.Context()), "SELECT pg_advisory_xact_lock($1)", lockID); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
			}
			w.WriteHeader(http.StatusCreated)
		})

		var stalled reply
		var wg sync.WaitGroup
		wg.Go(func() { stalled = send(h, req) })
		<-entered
		b.requireConflictWhileLeased(t, h, req)
		require.Equal(t, http.StatusCreated, retryUntilTakenOver(t, h, req).Status)

		unlock()
		wg.Wait()
		require.Equal(t, http.StatusConflict, stalled.Status, "%s", stalled.Body)
		require.Contains(t, stalled.problem(t).Detail, "nothing this request did was committed")

		var notes []string
		rows, err := b.pool.Query(context.Background(), b.sql("SELECT note FROM /* schema */charges"))
		require.NoError(t, err)
		notes, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"run 2"}, notes, "exactly once: the stalled request's charge rolled back")
		require.True(t, send(h, req).replayed())
	})

	// A WrapTx request whose transaction sits idle for a whole lease has its
	// session ended by the server, so its locks do not outlive its lease.
	// Nothing of it commits; it answers 500.
	t.Run("WrapTxIdle", func(t *testing.T) {
		t.Parallel()
		b := &testBundle{pool: pgtest.NewPool(t, 4), schema: pgtest.Schema(t)} // its sessions get killed
		m := b.middleware(t, crashConfig)
		b.setupCharges(t)
		var runs atomic.Int64
		var stalledPID int32 // the stalled request's server process; set before entered closes
		entered := make(chan struct{})
		stall, free := stallUntil(t)
		h := m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
			n := runs.Add(1)
			if err := b.insertCharge(r.Context(), tx, fmt.Sprint("run ", n)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if n == 1 {
				// The server's own pid, asked of the server: a pooler hands
				// the client a made-up one (PgConn().PID() through
				// PgBouncer is its cancel key, often beyond int4).
				if err := tx.QueryRow(r.Context(), "SELECT pg_backend_pid()").Scan(&stalledPID); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				close(entered)
				<-stall // idle in its transaction, ignoring its context
			}
			w.WriteHeader(http.StatusCreated)
		})

		var stalled reply
		var wg sync.WaitGroup
		wg.Go(func() { stalled = send(h, req) })
		<-entered
		require.Equal(t, http.StatusCreated, retryUntilTakenOver(t, h, req).Status)
		// The session's idle time runs from its last statement, a little
		// after the claim that started the lease, so the takeover can come
		// first: free the request only once the server has ended its session.
		require.Eventually(t, func() bool {
			var alive bool
			err := b.pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", stalledPID).Scan(&alive)
			return err == nil && !alive
		}, 20*time.Second, 20*time.Millisecond, "the server never ended the idle session")
		free()
		wg.Wait()
		require.Equal(t, http.StatusInternalServerError, stalled.Status, "%s", stalled.Body)
		require.Equal(t, "The request was not committed", stalled.problem(t).Title)
		require.Equal(t, 1, b.charges(t))
		require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */charges WHERE note = 'run 2'"))
		require.True(t, send(h, req).replayed())
	})
}

// A request stalled for longer than its key's whole expiry (a paused VM)
// wakes to find its key reused by a new request, still running. The token
// fence keeps the stalled request from storing its response under the new
// request's key, whose retries would then get an answer to another request.
func TestStalledRequestCannotStoreOverItsSuccessor(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{HandlerTimeout: 100 * time.Millisecond, Lease: 200 * time.Millisecond, Expiry: 400 * time.Millisecond})
	var runs atomic.Int64
	entered := []chan struct{}{make(chan struct{}), make(chan struct{})}
	stallA, freeA := stallUntil(t)
	stallB, freeB := stallUntil(t)
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		switch n {
		case 1:
			close(entered[0])
			<-stallA
		case 2:
			close(entered[1])
			<-stallB
		}
		w.Header().Set("Location", fmt.Sprint("/charges/", n))
		w.WriteHeader(http.StatusCreated)
	}))
	reqA := request{target: "/charges", key: "k", body: "a"}
	reqB := request{target: "/charges", key: "k", body: "b"}

	var gotA, gotB reply
	var wg sync.WaitGroup
	doneA := make(chan struct{})
	wg.Go(func() { gotA = send(h, reqA); close(doneA) })
	<-entered[0]
	wg.Go(func() {
		for { // 422 until A's key expires; then B restarts it, and stalls
			if gotB = send(h, reqB); gotB.Status != http.StatusUnprocessableEntity {
				return
			}
			time.Sleep(10 * time.Millisecond) // a client's pause between retries
		}
	})
	select {
	case <-entered[1]:
	case <-time.After(20 * time.Second):
		t.Fatal("the expired key was never restarted")
	}
	freeA() // A answers now, with B's request running under the key
	<-doneA
	freeB()
	wg.Wait()
	require.Equal(t, "/charges/1", gotA.Header.Get("Location"))
	require.Equal(t, "/charges/2", gotB.Header.Get("Location"))
	replay := send(h, reqB)
	require.True(t, replay.replayed())
	require.Equal(t, "/charges/2", replay.Header.Get("Location"), "B's key holds B's response")
	require.Equal(t, 1, b.row(t, "k").Attempts, "B restarted the key: its first attempt")
}

// TestChildProcess is not a test: it is the body of the child processes
// TestKilledServersKeyIsTakenOverAfterItsLease starts and kills. It serves
// a WrapTx handler that writes a charge, says so, and then hangs.
func TestChildProcess(t *testing.T) {
	if pgtest.ChildRole() == "" {
		t.Skip("the body of child processes started by other tests")
	}
	ctx := context.Background()
	schema := os.Getenv("PGBOX_TEST_SCHEMA")
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)

	killedConfig := crashConfig
	killedConfig.Schema = schema
	m, err := idempotency.New(pool, killedConfig)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /charges", m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		if _, err := tx.Exec(r.Context(), ident.Render("INSERT INTO /* schema */charges (note) VALUES ('child')", schema)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Println("handling") // the parent kills us right after reading this
		select {}
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fmt.Println("listening", ln.Addr())
	require.NoError(t, http.Serve(ln, mux))
}

// A server SIGKILLed while handling a request leaves its key claimed, with
// its transaction's writes lost. Retries get 409 until the lease ends; then
// one takes the key over, and the charge exists exactly once.
func TestKilledServersKeyIsTakenOverAfterItsLease(t *testing.T) {
	t.Parallel()
	m, b := setup(t, crashConfig)
	b.setupCharges(t)

	child := pgtest.StartChild(t, "TestChildProcess", "server", "PGBOX_TEST_SCHEMA="+b.schema)
	line, ok := child.Line(30 * time.Second)
	require.True(t, ok, "the child never started: %s", child.Stderr())
	addr, found := strings.CutPrefix(line, "listening ")
	require.True(t, found, line)

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		r, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/charges", strings.NewReader("b"))
		r.Header.Set("Idempotency-Key", "k")
		if resp, err := client.Do(r); err == nil {
			resp.Body.Close()
		}
	})
	line, ok = child.Line(30 * time.Second)
	require.True(t, ok && line == "handling", "%q; stderr: %s", line, child.Stderr())
	child.Kill()

	var runs atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /charges", m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		runs.Add(1)
		if err := b.insertCharge(r.Context(), tx, "parent"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	req := request{target: "/charges", key: "k", body: "b"}
	b.requireConflictWhileLeased(t, mux, req) // the dead server's lease still holds the key

	retried := retryUntilTakenOver(t, mux, req)
	require.Equal(t, http.StatusCreated, retried.Status)
	require.False(t, retried.replayed())
	require.EqualValues(t, 1, runs.Load())
	require.Equal(t, 2, b.row(t, "k").Attempts)
	require.Equal(t, 1, b.charges(t))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */charges WHERE note = 'parent'"), "the killed server's write never committed")
	require.True(t, send(mux, req).replayed())
}
