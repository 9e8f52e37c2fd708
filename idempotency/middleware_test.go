package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/idempotency"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// charge is the handler most tests protect. Each run answers 201 with a
// Location, a header that is not on the replay allow-list (X-Run, the run's
// number), and a body of bytes that are not text, echoing the request body.
func charge(runs *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Location", "/charges/"+strconv.FormatInt(n, 10))
		w.Header().Set("X-Run", strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(append([]byte{0x00, 0xff, 0xfe, '\r', '\n'}, body...))
	})
}

func TestFirstRequestRunsOnceAndIsReplayedByteForByte(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{})
	var runs atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /charges", m.Wrap(charge(&runs)))

	req := request{target: "/charges", key: "8e03978e-40d5-43e8-bc93-6894a57f9324", body: `{"cents":4200}`}
	first := send(mux, req)
	require.Equal(t, http.StatusCreated, first.Status)
	require.False(t, first.replayed())
	require.Equal(t, "1", first.Header.Get("X-Run"), "the first response carries every header the handler set")
	want := append([]byte{0x00, 0xff, 0xfe, '\r', '\n'}, req.body...)
	require.Equal(t, want, first.Body, "the handler reads the request body as sent")

	for range 3 {
		again := send(mux, req)
		require.Equal(t, http.StatusCreated, again.Status)
		require.True(t, again.replayed(), "a replay is marked")
		require.Equal(t, first.Body, again.Body, "replayed byte for byte")
		require.Equal(t, "/charges/1", again.Header.Get("Location"))
		require.Equal(t, "application/octet-stream", again.Header.Get("Content-Type"))
		require.Equal(t, strconv.Itoa(len(want)), again.Header.Get("Content-Length"))
		require.Empty(t, again.Header.Get("X-Run"), "headers off the allow-list are not replayed")
	}
	require.EqualValues(t, 1, runs.Load(), "the handler runs once")

	row := b.row(t, req.key)
	require.Equal(t, "done", row.State)
	require.Equal(t, 1, row.Attempts)
	require.Equal(t, http.StatusCreated, *row.Status)
	require.Equal(t, want, row.Body)
	require.Equal(t, map[string][]string{
		"Content-Length": {strconv.Itoa(len(want))},
		"Content-Type":   {"application/octet-stream"},
		"Location":       {"/charges/1"},
	}, row.Headers)
}

// Through a pool whose query mode sends parameters without their types (as
// a user behind PgBouncer may configure), a response is stored and
// replayed, by Wrap and by WrapTx, and the handler runs once.
func TestReplayInUntypedQueryModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.UntypedModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			m, b := setupOn(t, pgtest.NewPoolMode(t, mode, 4), idempotency.Config{})
			b.setupCharges(t)
			var runs, txRuns atomic.Int64
			mux := http.NewServeMux()
			mux.Handle("POST /charges", m.Wrap(charge(&runs)))
			mux.Handle("POST /tx-charges", m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
				txRuns.Add(1)
				if err := b.insertCharge(r.Context(), tx, "charged"); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.Header().Set("Location", "/tx-charges/1")
				w.WriteHeader(http.StatusCreated)
			}))

			for _, req := range []request{
				{target: "/charges", key: "k1", body: `{"cents":4200}`},
				{target: "/tx-charges", key: "k2", body: `{"cents":4200}`},
			} {
				first := send(mux, req)
				require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
				again := send(mux, req)
				require.Equal(t, http.StatusCreated, again.Status, "%s", again.Body)
				require.True(t, again.replayed(), req.target)
				require.Equal(t, first.Body, again.Body)
				require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
				require.Equal(t, "done", b.row(t, req.key).State)
			}
			require.EqualValues(t, 1, runs.Load())
			require.EqualValues(t, 1, txRuns.Load())
			require.Equal(t, 1, b.charges(t))
		})
	}
}

func TestReplayKeepsConfiguredHeadersAndSniffedType(t *testing.T) {
	t.Parallel()
	m, _ := setup(t, idempotency.Config{ReplayHeaders: []string{"etag", "X-Multi"}})
	var runs atomic.Int64
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		_, _ = io.WriteString(w, "<html><body>created</body></html>") // no Content-Type: sniffed
	}))

	first := send(h, request{target: "/pages", key: "k"})
	again := send(h, request{target: "/pages", key: "k"})
	require.True(t, again.replayed())
	require.Equal(t, http.StatusOK, again.Status, "no WriteHeader means 200, stored as such")
	require.Equal(t, "text/html; charset=utf-8", first.Header.Get("Content-Type"))
	require.Equal(t, first.Header.Get("Content-Type"), again.Header.Get("Content-Type"))
	require.Equal(t, `"v1"`, again.Header.Get("ETag"))
	require.Equal(t, []string{"a", "b"}, again.Header.Values("X-Multi"))
	require.Equal(t, first.Body, again.Body)
	require.EqualValues(t, 1, runs.Load())
}

func TestMissingKeyIsRefused(t *testing.T) {
	t.Parallel()

	t.Run("Required", func(t *testing.T) {
		t.Parallel()
		m, b := setup(t, idempotency.Config{})
		var runs atomic.Int64
		got := send(m.Wrap(charge(&runs)), request{target: "/charges", body: "x"})
		require.Equal(t, http.StatusBadRequest, got.Status)
		p := got.problem(t)
		require.Equal(t, "Idempotency-Key is missing", p.Title)
		require.Contains(t, p.Detail, "requires an Idempotency-Key header")
		require.Zero(t, runs.Load())
		require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */idempotency_keys"))
	})

	t.Run("CustomHeader", func(t *testing.T) {
		t.Parallel()
		m, _ := setup(t, idempotency.Config{KeyHeader: "X-Request-Key"})
		var runs atomic.Int64
		h := m.Wrap(charge(&runs))
		got := send(h, request{target: "/charges", key: "sent-in-the-wrong-header"})
		require.Equal(t, http.StatusBadRequest, got.Status)
		require.Contains(t, got.problem(t).Detail, "requires an X-Request-Key header")

		got = send(h, request{target: "/charges", header: http.Header{"X-Request-Key": {"k"}}})
		require.Equal(t, http.StatusCreated, got.Status)
		require.True(t, send(h, request{target: "/charges", header: http.Header{"X-Request-Key": {"k"}}}).replayed())
		require.EqualValues(t, 1, runs.Load())
	})

	t.Run("Allowed", func(t *testing.T) {
		t.Parallel()
		m, b := setup(t, idempotency.Config{AllowMissingKey: true})
		var runs atomic.Int64
		h := m.Wrap(charge(&runs))
		for range 2 {
			got := send(h, request{target: "/charges"})
			require.Equal(t, http.StatusCreated, got.Status)
			require.False(t, got.replayed())
		}
		require.EqualValues(t, 2, runs.Load(), "without a key there is no protection")
		require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */idempotency_keys"))
	})
}

func TestInvalidKeysAreRefused(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{})
	var runs atomic.Int64
	h := m.Wrap(charge(&runs))

	for name, tc := range map[string]struct {
		values []string
		detail string
	}{
		"Empty":         {[]string{""}, "header is empty"},
		"EmptyQuoted":   {[]string{`""`}, "header is empty"},
		"TooLong":       {[]string{strings.Repeat("k", idempotency.MaxKeyBytes+1)}, "256 bytes, over the 255-byte limit"},
		"Control":       {[]string{"key\x01"}, "byte 0x01 at offset 3"},
		"NonASCII":      {[]string{"clé"}, "byte 0xc3 at offset 2"},
		"Twice":         {[]string{"a", "b"}, "2 Idempotency-Key header fields"},
		"Unterminated":  {[]string{`"abc`}, "not a valid Structured Field string"},
		"BadEscape":     {[]string{`"a\bc"`}, "not a valid Structured Field string"},
		"InnerQuote":    {[]string{`"a"b"`}, "not a valid Structured Field string"},
		"QuotedControl": {[]string{"\"a\x7fb\""}, "byte 0x7f"},
	} {
		got := send(h, request{target: "/charges", header: http.Header{"Idempotency-Key": tc.values}})
		require.Equal(t, http.StatusBadRequest, got.Status, name)
		p := got.problem(t)
		require.Equal(t, "Idempotency-Key is invalid", p.Title, name)
		require.Contains(t, p.Detail, tc.detail, name)
	}
	require.Zero(t, runs.Load())
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */idempotency_keys"))

	// The longest key and every printable character are fine.
	longest := strings.Repeat("k", idempotency.MaxKeyBytes)
	require.Equal(t, http.StatusCreated, send(h, request{target: "/charges", key: longest}).Status)
	require.Equal(t, http.StatusCreated, send(h, request{target: "/charges", key: ` !#$%&'()*+,-./:;<=>?@[\]^_{|}~`}).Status)
}

// The IETF draft sends the key as a Structured Field string; most clients
// send it bare. Both name the same key.
func TestQuotedAndBareKeysAreTheSameKey(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{})
	var runs atomic.Int64
	h := m.Wrap(charge(&runs))

	first := send(h, request{target: "/charges", header: http.Header{"Idempotency-Key": {`"8e03978e-40d5"`}}})
	require.Equal(t, http.StatusCreated, first.Status)
	again := send(h, request{target: "/charges", key: "8e03978e-40d5"})
	require.True(t, again.replayed())
	require.EqualValues(t, 1, runs.Load())
	require.NotNil(t, b.row(t, "8e03978e-40d5"), "stored unquoted")

	// Escapes decode: "a\"b\\c" is the key a"b\c.
	require.Equal(t, http.StatusCreated, send(h, request{target: "/charges", header: http.Header{"Idempotency-Key": {`"a\"b\\c"`}}}).Status)
	require.True(t, send(h, request{target: "/charges", key: `a"b\c`}).replayed())
}

func TestOnlyConfiguredMethodsNeedAKey(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{Methods: []string{http.MethodPost, http.MethodPatch}})
	var runs atomic.Int64
	h := m.Wrap(charge(&runs))

	for range 2 {
		got := send(h, request{method: http.MethodGet, target: "/charges/1"})
		require.Equal(t, http.StatusCreated, got.Status, "GET goes straight through")
		got = send(h, request{method: http.MethodPut, target: "/charges/1", key: "put-key"})
		require.False(t, got.replayed(), "PUT is not protected here, key or not")
	}
	require.EqualValues(t, 4, runs.Load())
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */idempotency_keys"))

	require.Equal(t, http.StatusBadRequest, send(h, request{method: http.MethodPatch, target: "/charges/1"}).Status)
	send(h, request{method: http.MethodPatch, target: "/charges/1", key: "patch-key"})
	require.True(t, send(h, request{method: http.MethodPatch, target: "/charges/1", key: "patch-key"}).replayed())
	require.EqualValues(t, 5, runs.Load())
}

func TestSameKeyForADifferentRequestIs422(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{})
	var runs atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}/pay", m.Wrap(charge(&runs)))

	first := request{target: "/orders/17/pay", key: "k-1", body: `{"cents":4200}`}
	require.Equal(t, http.StatusCreated, send(mux, first).Status)

	for name, other := range map[string]request{
		"Body":  {target: "/orders/17/pay", key: "k-1", body: `{"cents":9999}`},
		"Path":  {target: "/orders/18/pay", key: "k-1", body: first.body}, // same route pattern, other order
		"Query": {target: "/orders/17/pay?currency=usd", key: "k-1", body: first.body},
		"Empty": {target: "/orders/17/pay", key: "k-1"},
	} {
		got := send(mux, other)
		require.Equal(t, http.StatusUnprocessableEntity, got.Status, name)
		p := got.problem(t)
		require.Equal(t, "Idempotency-Key is already used", p.Title)
		require.Contains(t, p.Detail, "send a new key for a new request")
	}
	require.EqualValues(t, 1, runs.Load())
	require.True(t, send(mux, first).replayed(), "the key still replays its own request")

	// A key whose request is still running is refused for another request
	// just the same: 422, not 409.
	release := make(chan struct{})
	entered := make(chan struct{})
	slow := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	}))
	var wg sync.WaitGroup
	wg.Go(func() { send(slow, request{target: "/slow", key: "k-2", body: "a"}) })
	<-entered
	require.Equal(t, http.StatusUnprocessableEntity, send(slow, request{target: "/slow", key: "k-2", body: "b"}).Status)
	require.Equal(t, http.StatusConflict, send(slow, request{target: "/slow", key: "k-2", body: "a"}).Status)
	close(release)
	wg.Wait()
	require.Equal(t, "done", b.row(t, "k-2").State)
}

// 32 requests with one key arrive at once while the first is still running:
// the handler runs once, and every other request is answered 409 with
// Retry-After straight away, without waiting for the first. The handler
// only returns once all 31 have their answer, so a duplicate that waited
// would hang the test.
func TestConcurrentRequestsWithOneKeyRunTheHandlerOnce(t *testing.T) {
	t.Parallel()
	const requests = 32

	for _, mode := range []string{"Wrap", "WrapTx"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := &testBundle{pool: pgtest.NewPool(t, requests+4), schema: pgtest.Schema(t)}
			m := b.middleware(t, idempotency.Config{RetryAfter: 2500 * time.Millisecond})
			b.exec(t, "CREATE TABLE /* schema */charges (n int)")

			var (
				runs     atomic.Int64
				answered atomic.Int64
			)
			othersAnswered := make(chan struct{})
			body := func(w http.ResponseWriter) {
				select { // until the other 31 have their answer (or, if that never happens, for long enough to fail)
				case <-othersAnswered:
				case <-time.After(10 * time.Second):
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "charged once")
			}
			var h http.Handler
			if mode == "Wrap" {
				h = m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					body(w)
				}))
			} else {
				h = m.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
					runs.Add(1)
					if _, err := tx.Exec(r.Context(), b.sql("INSERT INTO /* schema */charges VALUES (1)")); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					body(w)
				})
			}

			replies := make([]reply, requests)
			var all sync.WaitGroup
			start := make(chan struct{})
			for i := range requests {
				all.Go(func() {
					<-start
					replies[i] = send(h, request{target: "/charges", key: "the-key", body: `{"cents":4200}`})
					if replies[i].Status != http.StatusCreated && answered.Add(1) == requests-1 {
						close(othersAnswered)
					}
				})
			}
			close(start)
			all.Wait()

			require.EqualValues(t, 1, runs.Load(), "exactly one handler run")
			var created, conflicts int
			for _, r := range replies {
				switch r.Status {
				case http.StatusCreated:
					created++
					require.Equal(t, "charged once", string(r.Body))
				case http.StatusConflict:
					conflicts++
					require.Equal(t, "3", r.Header.Get("Retry-After"), "2.5s rounds up to 3")
					require.Equal(t, "A request is outstanding for this Idempotency-Key", r.problem(t).Title)
				default:
					t.Fatalf("unexpected status %d: %s", r.Status, r.Body)
				}
			}
			require.Equal(t, 1, created)
			require.Equal(t, requests-1, conflicts)
			if mode == "WrapTx" {
				require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */charges"))
			}

			again := send(h, request{target: "/charges", key: "the-key", body: `{"cents":4200}`})
			require.True(t, again.replayed())
			require.Equal(t, "charged once", string(again.Body))
		})
	}
}

// 32 requests with one key race a handler that answers at once: some find it
// running, some find its stored response. Either way the handler runs once
// and every 201 a client sees is the same response.
func TestConcurrentBurstGetsConflictsOrTheReplay(t *testing.T) {
	t.Parallel()
	const requests = 32
	b := &testBundle{pool: pgtest.NewPool(t, requests+4), schema: pgtest.Schema(t)}
	m := b.middleware(t, idempotency.Config{})
	var runs atomic.Int64
	h := m.Wrap(charge(&runs))

	replies := make([]reply, requests)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range requests {
		wg.Go(func() {
			<-start
			replies[i] = send(h, request{target: "/charges", key: "burst", body: "b"})
		})
	}
	close(start)
	wg.Wait()

	require.EqualValues(t, 1, runs.Load())
	var first []byte
	fresh := 0
	for _, r := range replies {
		switch r.Status {
		case http.StatusCreated:
			if !r.replayed() {
				fresh++
			}
			if first == nil {
				first = r.Body
			}
			require.Equal(t, first, r.Body)
			require.Equal(t, "/charges/1", r.Header.Get("Location"))
		case http.StatusConflict:
		default:
			t.Fatalf("unexpected status %d: %s", r.Status, r.Body)
		}
	}
	require.Equal(t, 1, fresh, "one first response; every other 201 is a replay")
}

func TestServerErrorsAreNotStoredAndReleaseTheKey(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusRequestTimeout} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			m, b := setup(t, idempotency.Config{})
			var runs atomic.Int64
			h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					w.Header().Set("Retry-After", "1")
					http.Error(w, "gateway down", status)
					return
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "charged")
			}))
			req := request{target: "/charges", key: "k", body: "b"}

			failed := send(h, req)
			require.Equal(t, status, failed.Status)
			require.Equal(t, "gateway down\n", string(failed.Body), "the failure reaches the client as written")
			require.Equal(t, "1", failed.Header.Get("Retry-After"))
			require.Nil(t, b.row(t, "k"), "the key is released at once")

			retried := send(h, req)
			require.Equal(t, http.StatusCreated, retried.Status)
			require.False(t, retried.replayed(), "the retry runs the handler afresh")

			again := send(h, req)
			require.True(t, again.replayed())
			require.Equal(t, "charged", string(again.Body))
			require.EqualValues(t, 2, runs.Load())
		})
	}
}

// A 4xx is the request's final answer: stored and replayed like a 2xx.
func TestClientErrorsAreStored(t *testing.T) {
	t.Parallel()
	m, _ := setup(t, idempotency.Config{})
	var runs atomic.Int64
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		http.Error(w, "card declined", http.StatusPaymentRequired)
	}))
	require.Equal(t, http.StatusPaymentRequired, send(h, request{target: "/charges", key: "k"}).Status)
	again := send(h, request{target: "/charges", key: "k"})
	require.Equal(t, http.StatusPaymentRequired, again.Status)
	require.True(t, again.replayed())
	require.Equal(t, "card declined\n", string(again.Body))
	require.EqualValues(t, 1, runs.Load())
}

func TestPanicReleasesTheKeyAndPanicsOn(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{})
	var runs atomic.Int64
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "half an answer")
			panic("gateway client blew up")
		}
		w.WriteHeader(http.StatusCreated)
	}))
	req := request{target: "/charges", key: "k"}

	require.PanicsWithValue(t, "gateway client blew up", func() { send(h, req) },
		"the panic goes on to net/http (and any recoverer outside)")
	require.Nil(t, b.row(t, "k"), "the key is released")

	require.Equal(t, http.StatusCreated, send(h, req).Status)
	require.True(t, send(h, req).replayed())
	require.EqualValues(t, 2, runs.Load())

	// Through a real server, the client of a panicking handler sees the
	// connection dropped, never the half-written answer.
	always := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "half an answer")
		panic(http.ErrAbortHandler) // net/http's quiet panic
	}))
	srv := newServer(t, always)
	r, err := http.NewRequest(http.MethodPost, srv.URL+"/charges", nil)
	require.NoError(t, err)
	r.Header.Set("Idempotency-Key", "k-2")
	resp, err := srv.Client().Do(r)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("the client got an answer: %d %q", resp.StatusCode, body)
	}
	require.Nil(t, b.row(t, "k-2"))
}

// newServer serves h on a loopback port until the test ends.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // panics are the point
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func TestKeysAreScopedPerRouteAndCaller(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{
		ScopeFunc: func(r *http.Request) string { return r.Header.Get("X-Account") },
	})
	var charges, refunds atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /charges", m.Wrap(charge(&charges)))
	mux.Handle("POST /refunds", m.Wrap(charge(&refunds)))
	alice := http.Header{"X-Account": {"alice"}}
	bob := http.Header{"X-Account": {"bob"}}

	// One key on two routes: two keys.
	require.False(t, send(mux, request{target: "/charges", key: "k", header: alice}).replayed())
	require.False(t, send(mux, request{target: "/refunds", key: "k", header: alice}).replayed())
	require.EqualValues(t, 1, charges.Load())
	require.EqualValues(t, 1, refunds.Load())

	// One key from two callers: two keys. Bob does not get Alice's answer,
	// even with a different body, which would be a 422 within one scope.
	got := send(mux, request{target: "/charges", key: "k", header: bob, body: "bob's"})
	require.Equal(t, http.StatusCreated, got.Status)
	require.False(t, got.replayed())
	require.Equal(t, "/charges/2", got.Header.Get("Location"))
	require.EqualValues(t, 2, charges.Load())

	// Each scope replays its own response.
	require.Equal(t, "/charges/1", send(mux, request{target: "/charges", key: "k", header: alice}).Header.Get("Location"))
	require.Equal(t, "/charges/2", send(mux, request{target: "/charges", key: "k", header: bob, body: "bob's"}).Header.Get("Location"))
	require.EqualValues(t, 2, charges.Load())

	require.Equal(t, 3, b.count(t, "SELECT count(*) FROM /* schema */idempotency_keys WHERE key = 'k'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */idempotency_keys WHERE route = 'POST /refunds' AND caller = 'alice'"))
}

func TestRouteDefaultsToMethodAndPathOutsideAMux(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{ScopeFunc: func(*http.Request) string { return strings.Repeat("é", 200) }})
	var runs atomic.Int64
	h := m.Wrap(charge(&runs)) // wraps no mux: no pattern
	send(h, request{target: "/orders/17/pay", key: "k"})
	send(h, request{target: "/orders/18/pay", key: "k"})
	require.EqualValues(t, 2, runs.Load(), "two paths, two routes")

	var route, caller string
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(
		"SELECT route, caller FROM /* schema */idempotency_keys ORDER BY route LIMIT 1")).Scan(&route, &caller))
	require.Equal(t, "POST /orders/17/pay", route)
	require.Regexp(t, "^sha256:[0-9a-f]{64}$", caller, "a caller name over 255 bytes is stored as its hash")
	require.True(t, send(h, request{target: "/orders/17/pay", key: "k"}).replayed(), "and still matches")
}

func TestOversizedBodyIs413(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{MaxRequestBytes: 10})
	var runs atomic.Int64
	h := m.Wrap(charge(&runs))

	got := send(h, request{target: "/charges", key: "k", body: strings.Repeat("x", 11)})
	require.Equal(t, http.StatusRequestEntityTooLarge, got.Status)
	require.Contains(t, got.problem(t).Detail, "over the 10-byte limit")
	require.Zero(t, runs.Load())
	require.Nil(t, b.row(t, "k"), "nothing is claimed")

	require.Equal(t, http.StatusCreated, send(h, request{target: "/charges", key: "k", body: strings.Repeat("x", 10)}).Status)
}

// Without its table the middleware cannot tell a retry from a first
// request, so it runs nothing and says 503; the log says what to run.
func TestUnmigratedSchemaIs503(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	m, err := idempotency.New(pgtest.Pool(t), idempotency.Config{
		Schema: pgtest.EmptySchema(t),
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil)),
	})
	require.NoError(t, err)
	var runs atomic.Int64

	got := send(m.Wrap(charge(&runs)), request{target: "/charges", key: "k"})
	require.Equal(t, http.StatusServiceUnavailable, got.Status)
	require.Equal(t, "1", got.Header.Get("Retry-After"))
	require.Equal(t, "Idempotency keys are unavailable", got.problem(t).Title)
	require.Zero(t, runs.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logs.String(), "run inboxctl migrate up")
}

func TestHandlerContextEndsAfterHandlerTimeout(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{HandlerTimeout: 50 * time.Millisecond})
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		http.Error(w, context.Cause(r.Context()).Error(), http.StatusGatewayTimeout)
	}))
	got := send(h, request{target: "/slow", key: "k"})
	require.Equal(t, http.StatusGatewayTimeout, got.Status)
	require.Equal(t, "context deadline exceeded\n", string(got.Body))
	require.Nil(t, b.row(t, "k"))
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	_, err := idempotency.New(nil, idempotency.Config{})
	require.EqualError(t, err, "idempotency: pool is nil")

	for name, tc := range map[string]struct {
		cfg  idempotency.Config
		want string
	}{
		"LeaseNotOverTimeout": {idempotency.Config{HandlerTimeout: time.Minute, Lease: time.Minute}, "Config.Lease (1m0s) must exceed Config.HandlerTimeout (1m0s)"},
		"ExpiryNotOverLease":  {idempotency.Config{Lease: time.Hour, Expiry: time.Hour}, "Config.Expiry (1h0m0s) must exceed Config.Lease (1h0m0s)"},
		"NegativeTimeout":     {idempotency.Config{HandlerTimeout: -time.Second}, "Config.HandlerTimeout is -1s: it must be positive"},
		"KeyHeader":           {idempotency.Config{KeyHeader: "Idempotency Key"}, `Config.KeyHeader "Idempotency Key" is not a valid header name`},
		"Method":              {idempotency.Config{Methods: []string{"POST", "PO ST"}}, `Config.Methods[1] "PO ST" is not a valid method`},
		"ReplayHeader":        {idempotency.Config{ReplayHeaders: []string{"X:Y"}}, `Config.ReplayHeaders[0] "X:Y" is not a valid header name`},
		"MaxRequestBytes":     {idempotency.Config{MaxRequestBytes: -2}, "Config.MaxRequestBytes is -2"},
		"RetryAfter":          {idempotency.Config{RetryAfter: -time.Second}, "Config.RetryAfter is -1s"},
		"Schema":              {idempotency.Config{Schema: strings.Repeat("s", 64)}, "Config.Schema: schema name"},
	} {
		_, err := idempotency.New(pool, tc.cfg)
		require.ErrorContains(t, err, tc.want, name)
		require.True(t, strings.HasPrefix(err.Error(), "idempotency: "), name)
	}

	cfg := idempotency.Config{}.WithDefaults()
	require.Equal(t, idempotency.ExpiryDefault, cfg.Expiry)
	require.Equal(t, idempotency.HandlerTimeoutDefault+30*time.Second, cfg.Lease)
	require.Equal(t, []string{http.MethodPost}, cfg.Methods)
	require.Equal(t, "Idempotency-Key", cfg.KeyHeader)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
