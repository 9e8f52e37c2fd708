package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/pgbox/pgbox/examples/orders/service/orders"
)

// How the clients misbehave, as fractions of carts. Each is what real
// clients do, and each must end with exactly one order per cart.
const (
	// timeoutRate: the client gives up on its first request after a few
	// milliseconds (a client-side timeout, a user closing the tab while
	// the request is in flight), then retries with the same key. The first
	// request may have been cut off before, during or after its commit.
	timeoutRate = 0.06
	// doubleSubmitRate: the client sends the request twice at once (a
	// double click, a retry racing the original). One runs; the other gets
	// 409 while it runs, or its stored answer.
	doubleSubmitRate = 0.03
	// lostAnswerRate: the client got its 201 but lost it (a crash, a
	// dropped connection on the way back) and retries anyway. It must get
	// the same order back.
	lostAnswerRate = 0.08
	// republishEvery: every this many orders, an operator re-publishes the
	// order's OrderPlaced event by hand, under a new message id.
	republishEvery = 100
)

// cart is one order a client wants placed.
type cart struct {
	body     []byte // the same bytes on every retry: the key names this exact request
	customer string
	id       string
	key      string // the Idempotency-Key, the same on every retry
}

// ClientStats is what the clients sent to the orders API and what they
// were told.
type ClientStats struct {
	// Cancelled counts requests the client gave up on before an answer.
	Cancelled int64
	// Created counts 201 answers that placed an order.
	Created int64
	// Failed counts carts that never got a 201: each is a violation.
	Failed int64
	// InProgress counts 409 answers: the key's first request was still
	// running.
	InProgress int64
	// Mismatched counts carts whose answers named different orders: each
	// is a violation.
	Mismatched int64
	// Replayed counts 201 answers replayed from the stored response
	// (Idempotent-Replayed: true).
	Replayed int64
	// Requests counts every request sent.
	Requests int64
	// ServerErrors counts 5xx answers: nothing stored, the retry runs
	// afresh.
	ServerErrors int64
}

// loader places orders through the orders API, as many clients would.
type loader struct {
	base string
	http *http.Client

	placed atomic.Int64 // carts with an order

	cancelled, created, failed, inProgress, mismatched, replayed, requests, serverErrors atomic.Int64

	mu       sync.Mutex
	orderIDs map[string]string // cart id → the order id the API answered
}

func newLoader(base string, clients int) *loader {
	return &loader{
		base:     base,
		http:     &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * clients}},
		orderIDs: map[string]string{},
	}
}

// close drops the client's idle connections.
func (l *loader) close() { l.http.CloseIdleConnections() }

// carts returns n carts, from 200 customers.
func carts(n int) []cart {
	out := make([]cart, n)
	for i := range out {
		customer := fmt.Sprintf("customer-%03d", i%200)
		out[i] = cart{
			body: mustJSON(orders.PlaceOrder{
				Cart:  fmt.Sprintf("cart-%06d", i+1),
				Cents: int64(100 + (i*7919)%99900),
				Email: customer + "@example.com",
			}),
			customer: customer,
			id:       fmt.Sprintf("cart-%06d", i+1),
			key:      uuid.NewString(),
		}
	}
	return out
}

// run places every cart's order from clients concurrent clients and
// returns when each cart has its order (or has failed for good).
func (l *loader) run(ctx context.Context, all []cart, clients int) {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for {
				i := int(next.Add(1)) - 1
				if i >= len(all) || ctx.Err() != nil {
					return
				}
				l.place(ctx, r, &all[i], &wg)
			}
		})
	}
	wg.Wait()
}

// place gets one cart's order placed, misbehaving the way real clients do.
func (l *loader) place(ctx context.Context, r *rand.Rand, c *cart, wg *sync.WaitGroup) {
	switch x := r.Float64(); {
	case x < timeoutRate:
		attemptCtx, cancel := context.WithTimeout(ctx, time.Duration(1+r.IntN(8))*time.Millisecond)
		_, _ = l.post(attemptCtx, c)
		cancel()
	case x < timeoutRate+doubleSubmitRate:
		wg.Go(func() { _ = l.until201(ctx, c) }) // the same request, at the same time
	case x < timeoutRate+doubleSubmitRate+lostAnswerRate:
		if l.until201(ctx, c) != nil {
			return
		}
		// The answer was lost on the way: the client cannot know the order
		// was placed, and asks again with the same key.
	}
	if l.until201(ctx, c) != nil {
		l.failed.Add(1)
		return
	}
	l.placed.Add(1)
}

// until201 sends the cart's request until it gets a 201, as a client with a
// sensible retry policy does: a 409 waits for Retry-After, a 5xx or a
// network error backs off.
func (l *loader) until201(ctx context.Context, c *cart) error {
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		attemptCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		wait, err := l.post(attemptCtx, c)
		cancel()
		if err == nil {
			return nil
		}
		if attempt == 50 || ctx.Err() != nil {
			return fmt.Errorf("%s: giving up after %d attempts: %w", c.id, attempt, err)
		}
		if wait == 0 {
			wait, backoff = backoff, min(2*backoff, time.Second)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// errRetry is what post returns for an answer worth retrying.
var errRetry = errors.New("retry")

// post sends the cart's request once. It returns nil on a 201, and
// otherwise how long the server asked the client to wait (0 for the
// client's own backoff) and an error.
func (l *loader) post(ctx context.Context, c *cart) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+"/orders", bytes.NewReader(c.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.key)
	req.Header.Set(orders.CustomerHeader, c.customer)
	l.requests.Add(1)
	resp, err := l.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			l.cancelled.Add(1)
		}
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			l.cancelled.Add(1)
		}
		return 0, err
	}
	switch {
	case resp.StatusCode == http.StatusCreated:
		var o orders.Order
		if err := json.Unmarshal(body, &o); err != nil || o.ID == "" {
			return 0, fmt.Errorf("undecodable 201: %q", body)
		}
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			l.replayed.Add(1)
		} else {
			l.created.Add(1)
		}
		l.record(c, o.ID)
		return 0, nil
	case resp.StatusCode == http.StatusConflict:
		l.inProgress.Add(1)
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return time.Duration(max(secs, 1)) * time.Second, errRetry
	case resp.StatusCode >= 500:
		l.serverErrors.Add(1)
		return 0, errRetry
	default:
		return 0, fmt.Errorf("unexpected answer %s: %s", resp.Status, body)
	}
}

// record notes the order id an answer named for a cart. Every answer for
// one key must name the same order.
func (l *loader) record(c *cart, orderID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch first, ok := l.orderIDs[c.id]; {
	case !ok:
		l.orderIDs[c.id] = orderID
	case first != orderID:
		l.mismatched.Add(1)
	}
}

// republish asks the orders API to publish some orders' OrderPlaced again,
// each under a new message id, and returns how many it did.
func (l *loader) republish(ctx context.Context, all []cart) (int, error) {
	n := 0
	for i := republishEvery / 2; i < len(all); i += republishEvery {
		c := &all[i]
		l.mu.Lock()
		orderID := l.orderIDs[c.id]
		l.mu.Unlock()
		if orderID == "" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+"/orders/"+orderID+"/republish", nil)
		if err != nil {
			return n, err
		}
		req.Header.Set("Idempotency-Key", uuid.NewString())
		req.Header.Set(orders.CustomerHeader, c.customer)
		resp, err := l.http.Do(req)
		if err != nil {
			return n, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return n, fmt.Errorf("republish %s: %s", orderID, resp.Status)
		}
		n++
	}
	return n, nil
}

func (l *loader) stats() ClientStats {
	return ClientStats{
		Cancelled:    l.cancelled.Load(),
		Created:      l.created.Load(),
		Failed:       l.failed.Load(),
		InProgress:   l.inProgress.Load(),
		Mismatched:   l.mismatched.Load(),
		Replayed:     l.replayed.Load(),
		Requests:     l.requests.Load(),
		ServerErrors: l.serverErrors.Load(),
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
