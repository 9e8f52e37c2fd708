package dispatcher

// The dispatcher's SQL. "/* schema */" is replaced by the quoted schema
// name when a Dispatcher is created (ident.Render).

// claimSQL takes up to $2 claimable messages of consumer $1 for a worker,
// in one autocommitted statement, so the attempt is counted before any
// handler runs: a message that crashes its process still uses up its
// attempts and ends dead instead of crash-looping.
//
// A message whose lease expired (its worker died, or was paused or cut off
// past the lease) is rescued alone, before any fresh work, and only when $6
// says this process is not already handling a rescued message: its worker
// may have died handling it, and a message that crashes its process must
// not take innocent neighbours down with it each time. The rescue records
// the lost attempt in the history; if it was the last attempt, the message
// is marked dead instead of claimed.
//
// Fresh work is pending and due. A keyed message is claimable only at the
// head of its key: no earlier message of the key may be pending, running or
// dead. That keeps one message per key in flight across every worker and
// process, in seq order; a retrying or dead head holds up only its own key.
//
// FOR UPDATE SKIP LOCKED lets many workers claim at once without waiting on
// each other; rows another worker is locking are simply someone else's. The
// claim token fences every later write to the rows: a worker that lost its
// claim matches nothing.
//
// The claim commits asynchronously (synchronous_commit off for this
// statement's transaction alone): it is visible to every session at once,
// survives the death of this process, and is made durable by the batch's
// own synchronous commit, whose WAL flush covers it. Only a crash of the
// database server itself between the claim and that commit can lose it, and
// then the handlers' writes are lost with it: the message is simply claimed
// again, with one attempt fewer counted. That saves a WAL flush, the
// costliest step, on every batch.
const claimSQL = `
WITH rescued AS (
    SELECT i.consumer, i.message_id
    FROM /* schema */inbox AS i
    WHERE $6 AND i.consumer = $1 AND i.status = 'running' AND i.available_at <= now()
    ORDER BY i.available_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
fresh AS (
    SELECT i.consumer, i.message_id
    FROM /* schema */inbox AS i
    WHERE i.consumer = $1
      AND i.status = 'pending'
      AND i.available_at <= now()
      AND NOT EXISTS (SELECT 1 FROM rescued)
      AND (i.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM /* schema */inbox AS earlier
            WHERE earlier.consumer = i.consumer
              AND earlier.ordering_key = i.ordering_key
              AND earlier.status IN ('pending', 'running', 'dead')
              AND earlier.seq < i.seq))
    ORDER BY i.available_at, i.seq
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
claimable AS (
    SELECT r.*, true AS rescue FROM rescued AS r
    UNION ALL
    SELECT f.*, false AS rescue FROM fresh AS f
),
async AS (
    SELECT set_config('synchronous_commit', 'off', true)
)
UPDATE /* schema */inbox AS i SET
    status       = CASE WHEN i.status = 'running' AND i.attempts >= i.max_attempts THEN 'dead' ELSE 'running' END,
    attempts     = CASE WHEN i.status = 'running' AND i.attempts >= i.max_attempts THEN i.attempts ELSE i.attempts + 1 END,
    claim_token  = $3,
    available_at = now() + $4 * interval '1 millisecond',
    last_error   = CASE WHEN i.status = 'running' THEN $5 ELSE i.last_error END,
    errors       = CASE WHEN i.status = 'running'
                        THEN i.errors || jsonb_build_array(jsonb_build_object('attempt', i.attempts, 'at', now(), 'error', $5::text))
                        ELSE i.errors END
FROM claimable AS c CROSS JOIN async
WHERE i.consumer = c.consumer AND i.message_id = c.message_id
RETURNING i.message_id, i.status, i.event_type, i.payload, i.metadata, coalesce(i.ordering_key, ''),
          i.attempts, i.max_attempts, i.received_at, i.seq, c.rescue`

// lockClaimedSQL opens a batch's handler transaction by locking the rows it
// still holds the claim to. From here to commit no other worker can take
// them, whatever their lease says, so a handler runs only for a message
// whose claim is still good.
//
// It waits for locks rather than skipping them: other workers' claim
// statements briefly lock rows they scan and then reject, and a skipped row
// would look lost. A row that another worker reclaimed after our lease
// expired fails the token check once its lock is free. Rows are locked in
// message id order, so two workers locking overlapping rows cannot
// deadlock.
const lockClaimedSQL = `
SELECT message_id FROM /* schema */inbox
WHERE consumer = $1 AND message_id = ANY($2::text[]) AND claim_token = $3 AND status = 'running'
ORDER BY message_id
FOR NO KEY UPDATE`

// renewLeaseSQL restarts the lease of claimed messages that are still
// this worker's, and returns how many it renewed: just before a leased
// handler runs (one id: is the claim still ours?), and periodically for a
// batch's leased messages still waiting their turn.
const renewLeaseSQL = `
UPDATE /* schema */inbox SET available_at = now() + $4 * interval '1 millisecond'
WHERE consumer = $1 AND message_id = ANY($2::text[]) AND claim_token = $3 AND status = 'running'`

// completeSQL records the outcome of every message a worker handled, in one
// statement, fenced by the claim token: done; pending again after a backoff
// (a failure) or a snooze; dead; or released (pending now, the attempt
// refunded) when the dispatcher stopped before finishing it. Each failure
// appends {attempt, at, error, trace} to the row's history. Due times are
// the database's now() plus a delay, never a worker's clock.
const completeSQL = `
UPDATE /* schema */inbox AS i SET
    status       = o.status,
    attempts     = i.attempts - o.refund,
    available_at = CASE WHEN o.status = 'pending' THEN now() + o.delay_ms * interval '1 millisecond' ELSE i.available_at END,
    processed_at = CASE WHEN o.status = 'done' THEN now() ELSE i.processed_at END,
    claim_token  = NULL,
    last_error   = coalesce(o.error, i.last_error),
    errors       = CASE WHEN o.error IS NULL THEN i.errors
                        ELSE i.errors || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                            'attempt', i.attempts, 'at', now(), 'error', o.error, 'trace', o.trace))) END
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::int[], $7::text[], $8::text[])
    AS o(message_id, status, delay_ms, refund, error, trace)
WHERE i.consumer = $1 AND i.message_id = o.message_id AND i.claim_token = $2 AND i.status = 'running'`
