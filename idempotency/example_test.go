package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/idempotency"
	"github.com/pgbox/pgbox/pgboxtest"
)

// post sends a POST with an Idempotency-Key (none when key is empty) and
// prints what came back: the status, whether it was a replay, and the body,
// or a problem's title.
func post(client *http.Client, url, key, body string) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		panic(err)
	}
	if resp.Header.Get("Content-Type") == idempotency.ProblemContentType {
		var p idempotency.Problem
		if err := json.Unmarshal(got, &p); err != nil {
			panic(err)
		}
		got = []byte(p.Title)
	}
	replayed := ""
	if resp.Header.Get(idempotency.ReplayedHeader) == "true" {
		replayed = " (replayed)"
	}
	fmt.Printf("%s%s: %s\n", resp.Status, replayed, bytes.TrimSpace(got))
}

// A client charges a card, loses the answer (a timeout, a dropped
// connection) and retries with the same key: the card is charged once, and
// the retry gets the first answer back. Reusing the key for another request,
// or leaving it out, is refused.
func Example() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_idempotency")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	idem, err := idempotency.New(db.Pool, idempotency.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	var charged atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /charges", idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charged.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprint("/charges/", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post(srv.Client(), srv.URL+"/charges", "7f1c9a52-charge-order-17", `{"cents":4200}`)
	post(srv.Client(), srv.URL+"/charges", "7f1c9a52-charge-order-17", `{"cents":4200}`) // the retry
	post(srv.Client(), srv.URL+"/charges", "7f1c9a52-charge-order-17", `{"cents":9999}`) // another request, same key
	post(srv.Client(), srv.URL+"/charges", "", `{"cents":4200}`)
	fmt.Println("charged:", charged.Load())
	// Output:
	// 201 Created: {"charge":1}
	// 201 Created (replayed): {"charge":1}
	// 422 Unprocessable Entity: Idempotency-Key is already used
	// 400 Bad Request: Idempotency-Key is missing
	// charged: 1
}

// With WrapTx the handler writes in the transaction that also stores its
// response: the charge and the stored answer commit together. A failure
// (here, a 503 on the first try) rolls the charge back and releases the
// key, so the retry charges afresh, once.
func ExampleMiddleware_WrapTx() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_idempotency_wraptx")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE "+db.Table("charges")+" (id serial PRIMARY KEY, cents int)"); err != nil {
		panic(err)
	}

	idem, err := idempotency.New(db.Pool, idempotency.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	var attempts atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /charges", idem.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		var id int
		if err := tx.QueryRow(r.Context(), "INSERT INTO "+db.Table("charges")+" (cents) VALUES (4200) RETURNING id").Scan(&id); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		if attempts.Add(1) == 1 {
			http.Error(w, "card network timeout", http.StatusServiceUnavailable) // not stored: rolled back
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, id)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 {
		post(srv.Client(), srv.URL+"/charges", "charge-order-17", `{"cents":4200}`)
	}
	var charges int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("charges")).Scan(&charges); err != nil {
		panic(err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// 503 Service Unavailable: card network timeout
	// 201 Created: {"charge":2}
	// 201 Created (replayed): {"charge":2}
	// charges: 1
}

// A database outage (a failover, a restart) that cuts a WrapTx handler's
// transaction is waited out inside the request, for up to
// Config.OutageRetry: the transaction rolled back, so the handler runs
// again and the client gets its 201, not a 503. Here the handler's first
// run ends its own session, as a failover would.
func ExampleConfig_outageRetry() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_idempotency_outage")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE "+db.Table("charges")+" (id serial PRIMARY KEY, cents int)"); err != nil {
		panic(err)
	}

	idem, err := idempotency.New(db.Pool, idempotency.Config{
		OutageRetry: 20 * time.Second, // the default is idempotency.OutageRetryDefault; -1 answers 503 at once
		Schema:      db.Schema,
	})
	if err != nil {
		panic(err)
	}
	var runs atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /charges", idem.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		if runs.Add(1) == 1 {
			_, _ = tx.Exec(r.Context(), "SELECT pg_terminate_backend(pg_backend_pid())") // the failover
		}
		var id int
		if err := tx.QueryRow(r.Context(), "INSERT INTO "+db.Table("charges")+" (cents) VALUES (4200) RETURNING id").Scan(&id); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, id)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post(srv.Client(), srv.URL+"/charges", "charge-order-18", `{"cents":4200}`)
	var charges int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Table("charges")).Scan(&charges); err != nil {
		panic(err)
	}
	fmt.Println("handler runs:", runs.Load(), "charges:", charges)
	// Output:
	// 201 Created: {"charge":1}
	// handler runs: 2 charges: 1
}
