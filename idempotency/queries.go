package idempotency

import "github.com/pgbox/pgbox/internal/tables"

// The middleware's SQL. "/* schema */" is replaced by the quoted schema name
// when a Middleware is created (ident.Render). $1, $2, $3 are always the
// key's route, caller and key. Every time is the database's now() plus a
// duration: the web servers' clocks never matter.

// claimSQL is the first request's claim, one autocommitted statement. The
// primary key is the dedupe: a concurrent duplicate's INSERT finds the
// committed row and inserts nothing, without waiting, so it can answer 409
// at once. ON CONFLICT DO NOTHING takes no row lock, so a duplicate never
// queues behind the request that holds the key either. (It does wait, for
// the moment it takes, on a transaction that is updating the row: the
// final write of WrapTx, which runs just before that transaction commits.)
const claimSQL = `
INSERT INTO /* schema */idempotency_keys AS k
    (route, caller, key, fingerprint, lock_token, locked_until, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond', now() + $7 * interval '1 millisecond')
ON CONFLICT (route, caller, key) DO NOTHING`

// lookupSQL reads the row a claim collided with, in a statement of its own
// so that its snapshot sees the row the claim found committed. The lease
// and expiry are judged here, by the database clock.
const lookupSQL = `
SELECT state, fingerprint, lock_token, coalesce(locked_until <= now(), false), expires_at <= now(),
       status, headers, body
FROM /* schema */idempotency_keys
WHERE route = $1 AND caller = $2 AND key = $3`

// takeOverSQL gives a key whose request never answered (its lease ended:
// the process crashed, stalled or lost the database) to a retry of the same
// request. It is fenced by the token the retry saw, so of several retries
// racing for it exactly one wins; the others match nothing and look again.
// The lease is checked again under the row lock; that is redundant while
// nothing renews a lease without a new token, and keeps the statement right
// on its own should lease renewal ever be added.
const takeOverSQL = `
UPDATE /* schema */idempotency_keys SET
    lock_token   = $5,
    locked_until = now() + $6 * interval '1 millisecond',
    attempts     = attempts + 1
WHERE route = $1 AND caller = $2 AND key = $3
  AND state = 'in_progress' AND lock_token = $4 AND locked_until <= now()`

// restartSQL reuses an expired key for a new request, as if it had never
// been used: a fresh fingerprint, lease and expiry. An expired key whose
// request still holds its lease (a lease longer than the expiry; Config
// forbids it) is left alone.
const restartSQL = `
UPDATE /* schema */idempotency_keys SET
    fingerprint  = $4,
    state        = 'in_progress',
    attempts     = 1,
    lock_token   = $5,
    locked_until = now() + $6 * interval '1 millisecond',
    status       = NULL,
    headers      = NULL,
    body         = NULL,
    created_at   = now(),
    completed_at = NULL,
    expires_at   = now() + $7 * interval '1 millisecond'
WHERE route = $1 AND caller = $2 AND key = $3
  AND expires_at <= now() AND ` + tables.IdempotencyKeyFree

// completeSQL stores the response and marks the key done, fenced by the
// claim's token: a request that lost its key to a retry (it ran past its
// lease) stores nothing, and in WrapTx its whole transaction rolls back.
const completeSQL = `
UPDATE /* schema */idempotency_keys SET
    state        = 'done',
    lock_token   = NULL,
    locked_until = NULL,
    status       = $5,
    headers      = $6::jsonb,
    body         = $7,
    completed_at = now()
WHERE route = $1 AND caller = $2 AND key = $3 AND state = 'in_progress' AND lock_token = $4`

// releaseSQL forgets a claim whose request failed (a 5xx, a panic, a
// transaction that did not commit), so that the client's retry runs the
// handler afresh at once instead of waiting out the lease. Fenced by the
// token, so it never deletes a key another request has taken over.
const releaseSQL = `
DELETE FROM /* schema */idempotency_keys
WHERE route = $1 AND caller = $2 AND key = $3 AND state = 'in_progress' AND lock_token = $4`

// cleanupSQL deletes up to $1 expired keys, oldest first, along
// idempotency_keys_expires_idx. A key whose request still holds its lease
// is kept. SKIP LOCKED lets several cleaners run at once without waiting on
// each other, or on a request restarting one of the keys.
const cleanupSQL = `
DELETE FROM /* schema */idempotency_keys
WHERE (route, caller, key) IN (
    SELECT route, caller, key FROM /* schema */idempotency_keys
    WHERE expires_at <= now() AND ` + tables.IdempotencyKeyFree + `
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED)`
