// Package idempotency is net/http middleware that makes retried requests
// safe, following the IETF httpapi draft "The Idempotency-Key HTTP Header
// Field" and the behaviour payment APIs are known for.
//
// A client sends a unique key with each POST (a UUID) and the same key
// again only to retry that same request, after a timeout or a dropped
// connection. The first request with a key runs the handler once; its
// response is stored in PostgreSQL and replayed, byte for byte and marked
// with "Idempotent-Replayed: true", to every later request with the key.
//
//	idem, err := idempotency.New(pool, idempotency.Config{
//		ScopeFunc: func(r *http.Request) string { return accountID(r.Context()) },
//	})
//	mux.Handle("POST /orders", idem.Wrap(createOrder))
//	mux.Handle("POST /charges", idem.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
//		// Written in the transaction that also stores this response:
//		// charged and answered commit together, or neither does.
//		if _, err := tx.Exec(r.Context(), "INSERT INTO charges …"); err != nil {
//			http.Error(w, "try again", http.StatusServiceUnavailable) // 5xx: not stored, key released
//			return
//		}
//		w.WriteHeader(http.StatusCreated)
//	}))
//
// # What a request gets
//
//   - No key, on a method that needs one (Config.Methods, POST by default):
//     400 with an RFC 9457 problem body saying the key is required, unless
//     Config.AllowMissingKey lets it through unprotected. An empty,
//     over-long (MaxKeyBytes) or non-printable key, or two key headers: 400.
//   - A new key: the handler runs, once. A final response (any status below
//     500 except 408 and 429) is stored: its status, the headers on the
//     allow-list (Config.ReplayHeaders) and its body.
//   - The same key with the same request (method, target and body, compared
//     by SHA-256): the stored response, replayed.
//   - The same key with a different request: 422. A key names one request.
//   - The same key while the first request is still running: 409 with
//     Retry-After, at once; the duplicate never waits for the first.
//   - A 5xx, 408 or 429 from the handler, or a panic: nothing is stored and
//     the key is released, so the client's retry runs the handler afresh. A
//     panic goes on to net/http after the key is released (it is not turned
//     into a 500): net/http logs it and drops the connection, and any
//     recovery middleware outside this one still sees it.
//
// Keys belong to a route (Config.RouteFunc, by default the ServeMux pattern)
// and to a caller (Config.ScopeFunc): the same key on two routes, or from two
// callers, is two independent keys. A key is remembered for Config.Expiry (24
// hours by default) after its first use; after that it is new again, and
// DeleteExpired (which package maintenance runs) removes it.
//
// # Crashes and leases
//
// The first request claims its key with one autocommitted INSERT … ON
// CONFLICT DO NOTHING, which also sets a lease (Config.Lease, by the
// database clock). If its process dies before answering, the key stays
// claimed until the lease ends; the next retry then takes it over, with a
// fenced UPDATE that exactly one retry can win, and runs the handler again.
// Every later write of a request to its key (storing the response, releasing
// the key) is fenced by its claim's random token, so a request that stalled
// past its lease cannot overwrite its successor's.
//
// # Exactly once, or at least once
//
// With WrapTx the handler's writes and its stored response commit in one
// transaction: the effect happens exactly once whatever crashes, retries or
// stalls. With Wrap the handler's effects are its own; its response is
// stored after it returns. If the process dies in between, or the handler
// outlives its lease, a retry runs the handler again: at least once, like
// any call to the outside world. Wrap suits handlers whose effects are
// idempotent themselves (an upsert, a call that carries its own idempotency
// key downstream); WrapTx suits the rest.
//
// # Responses are buffered
//
// The handler writes to a buffer, and the response is sent only once it is
// stored (and, with WrapTx, committed), so a client never receives an answer
// that a failed commit takes back. Handlers therefore cannot stream or
// hijack the connection. The request body is read whole before the handler
// runs (up to Config.MaxRequestBytes, 413 beyond) to fingerprint it; the
// handler reads it as usual.
package idempotency
