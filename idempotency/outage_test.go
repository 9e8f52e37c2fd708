package idempotency_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/idempotency"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// faults breaks a pool's connections for real, on the client's side: while
// down, a new connection goes to a port nothing listens on (refused, as a
// server that is down or restarting refuses it); when cutAtCommit is set,
// the next COMMIT reaches the server, which commits, and its answer is
// lost with the connection.
type faults struct {
	down        atomic.Bool
	refused     atomic.Int32 // connections refused while down
	cutAtCommit atomic.Bool
	deadAddr    string
}

// faultyPool returns a pool of its own whose connections f breaks.
func faultyPool(t *testing.T, f *faults) *pgxpool.Pool {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.deadAddr = l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	return pgtest.NewPoolWith(t, 4, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			if f.down.Load() {
				f.refused.Add(1)
				return d.DialContext(ctx, "tcp", f.deadAddr)
			}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &faultyConn{Conn: c, f: f}, nil
		}
	})
}

type faultyConn struct {
	net.Conn
	f         *faults
	committed bool // a COMMIT was sent whose answer is to be lost
}

var commitMsg = []byte("commit\x00") // pgx sends Tx.Commit as a simple query

func (c *faultyConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, commitMsg) && c.f.cutAtCommit.CompareAndSwap(true, false) {
		c.committed = true
	}
	return c.Conn.Write(p)
}

func (c *faultyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.committed && err == nil && n > 0 {
		// The server answered the COMMIT, so it is done: lose the answer.
		_ = c.Conn.Close()
		return 0, net.ErrClosed
	}
	return n, err
}

// A request that arrives while the database refuses connections (a
// failover, a restart) waits for it and is answered 2xx once it is back,
// with its handler run once: no 503.
func TestRequestWaitsOutADatabaseOutage(t *testing.T) {
	t.Parallel()
	f := &faults{}
	m, b := setupOn(t, faultyPool(t, f), idempotency.Config{})
	b.setupCharges(t)
	var runs atomic.Int32
	h := m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		runs.Add(1)
		if err := b.insertCharge(r.Context(), tx, "charged"); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})

	f.down.Store(true)
	b.pool.Reset() // every connection lost
	answered := make(chan reply, 1)
	go func() { answered <- send(h, request{target: "/charges", key: "k", body: `{"cents":100}`}) }()
	require.Eventually(t, func() bool { return f.refused.Load() >= 3 }, 10*time.Second, time.Millisecond,
		"the request tries the database again while it is down")
	f.down.Store(false)

	res := <-answered
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Equal(t, int32(1), runs.Load())
	require.Equal(t, 1, b.charges(t))
	require.Equal(t, "done", b.row(t, "k").State)
}

// A WrapTx handler whose transaction the server cut under it (its session
// ended, as in a failover) wrote nothing that lasts: it runs again, on a
// new transaction, with the same body, and the client gets its 2xx.
func TestWrapTxRunsAgainWhenTheDatabaseCutsItsTransaction(t *testing.T) {
	t.Parallel()
	m, b := setupOn(t, pgtest.NewPool(t, 4), idempotency.Config{})
	b.setupCharges(t)
	var runs atomic.Int32
	h := m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(r.Body)
		if runs.Add(1) == 1 {
			var pid int32 // the server's, not the client's idea of it: behind PgBouncer they differ
			require.NoError(t, tx.QueryRow(r.Context(), "SELECT pg_backend_pid()").Scan(&pid))
			_, err := pgtest.Pool(t).Exec(r.Context(), "SELECT pg_terminate_backend($1)", pid)
			require.NoError(t, err)
		}
		if err := b.insertCharge(r.Context(), tx, body.String()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})

	res := send(h, request{target: "/charges", key: "k", body: `{"cents":100}`})
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Equal(t, int32(2), runs.Load())
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM /* schema */charges WHERE note = '{"cents":100}'`), "one charge, from the body")
	require.Equal(t, 1, b.charges(t))
	require.Equal(t, "done", b.row(t, "k").State)
}

// A commit whose answer was lost with the connection is in doubt. Here it
// happened: the request looks the key up and sends the stored response,
// and never runs the handler again.
func TestWrapTxCommitInDoubtNeverRunsTwice(t *testing.T) {
	t.Parallel()
	f := &faults{}
	m, b := setupOn(t, faultyPool(t, f), idempotency.Config{})
	b.setupCharges(t)
	var runs atomic.Int32
	h := m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		runs.Add(1)
		if err := b.insertCharge(r.Context(), tx, "charged"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f.cutAtCommit.Store(true)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"charged":100}`))
	})

	res := send(h, request{target: "/charges", key: "k", body: `{"cents":100}`})
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Equal(t, `{"charged":100}`, string(res.Body))
	require.False(t, f.cutAtCommit.Load(), "the commit's answer was lost")
	require.Equal(t, int32(1), runs.Load())
	require.Equal(t, 1, b.charges(t))
}
