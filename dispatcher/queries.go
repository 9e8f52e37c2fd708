package dispatcher

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/internal/tables"
)

// The dispatcher's SQL. "/* schema */" is replaced by the quoted schema
// name when a Dispatcher is created (ident.Render).
//
// A batch is claimed inside the transaction that handles it. claimSQL
// locks the messages and, in the same row write, marks in-transaction
// messages done and hands leased ones a lease: one write per message, the
// least a queue can do. Nobody else sees that until the transaction
// commits; its row locks keep every other worker off the messages until
// then, and if the transaction dies (the process crashed, the connection
// was cut, the server ended a stalled transaction) the marks die with it
// and the messages are claimable again at once. The handlers' writes and
// the done mark commit together or not at all: the transaction is the
// claim's fence.
//
// What must outlive such a death is the attempt, counted before any
// handler runs, so a message that crashes its process ends dead instead of
// crash-looping. recordClaimSQL does that from another session, one row
// per batch in inbox_claims; reconcileSQL turns the rows of transactions
// that aborted into counted, recorded, lost attempts.

// claimPlanning is how the claim is planned: the batch transaction begins
// with it, and claimPlanned ends it in the claim's own round trip, so that
// the handlers' statements are planned as their session says. See claimSQL.
const claimPlanning = "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL plan_cache_mode = force_generic_plan"

// beginBatchSQL begins a batch transaction: with claimPlanning, and ended
// by the server if it stays idle for a lease (see Dispatcher.runBatch).
func beginBatchSQL(lease time.Duration) string {
	return fmt.Sprintf("BEGIN; %s; SET LOCAL idle_in_transaction_session_timeout = %d", claimPlanning, lease.Milliseconds())
}

// claimPlanned ends claimPlanning, one statement each, as a pipeline needs.
var claimPlanned = []string{"SET LOCAL enable_seqscan TO DEFAULT", "SET LOCAL enable_bitmapscan TO DEFAULT", "SET LOCAL plan_cache_mode TO DEFAULT"}

// batchPlaceholder is where claimSQL's text holds the batch size, put in
// as a number when a Dispatcher is made.
const batchPlaceholder = "/* batch */"

// claimSQL claims up to the batch size (batchSQL) messages of consumer $1
// in the calling (batch) transaction, and returns them with the
// transaction's id.
//
// A message whose lease expired (a leased handler's worker died, or a batch
// was lost and reconciled, see reconcileSQL) is rescued alone, before any
// fresh work, and only when $5 says this process is not already handling a
// rescued message: its worker may have died handling it, and a message that
// crashes its process must not take innocent neighbours down with it each
// time. A rescued leased attempt was never recorded (its claim_token is
// still set): the rescue records it as lost, and if it was the last
// attempt, marks the message dead instead of claiming it.
//
// Fresh work is pending and due, and found from the frontier $8 on (see
// frontier; NULL reads the pending index from its start). The claim
// returns the oldest available_at among the fresh messages it took, to
// move the frontier on. A keyed message is claimable only at the
// head of its key (tables.InboxAtKeyHead): no earlier message of the key
// may be pending, running or dead. That keeps one message per key in flight
// across every worker and process, in seq order; a retrying or dead head
// holds up only its own key. A head being handled is still pending to
// everyone else until its batch commits, so its successor waits.
//
// FOR UPDATE SKIP LOCKED lets many workers claim at once without waiting on
// each other; rows another worker is locking are simply someone else's.
//
// The update finds the locked rows again by where their lock found them
// (tableoid, ctid: a row locked by this transaction cannot move), with a
// TID probe per row, in the partitions of the claimed buckets' ranges only
// (the inbox is partitioned, see migration 9; dated and undated buckets
// apart, so that a batch holding both does not probe the days between).
// It joins nothing: whether a claimed row was rescued, and what it
// becomes, follows from the row itself (a rescued row is running, a fresh
// one pending). One row can be locked and not claimed: one that another
// transaction changed, leaving it due, after this statement's snapshot
// was taken (a message given back by a stopping dispatcher), whose lock
// returns the new version, which the update's snapshot does not see. It
// waits for the batch to commit, and is claimed by the next.
//
// So its plan need not trust the planner's idea of the inbox's size, which
// is often wrong: pgx prepares the statement, and the generic plan
// PostgreSQL settles on is made once, with each partition at the size it
// had then. Made while today's partition, or the one of undated ids, was
// small, a claim that joined its rows back by key hash-joined them to
// every row of the consumer in it, and went on doing so as it grew, until
// autovacuum next analyzed it (48 ms a claim of 200 in the
// dispatch-continuous bench on a fresh inbox, 0.66x River); a TID probe
// judged against a small partition loses to a sequential scan of it. With
// claimPlanning (sequential and bitmap scans off, for the claim alone)
// every plan left reads a partition by TID probes and by its pending,
// running and key indexes in their order: none reads a partition whole,
// however small the planner thinks it. The bucket ranges are ORed so that
// no plain index scan can use them either (they would need a bitmap scan).
// Planning afresh at each execution would serve too, but costs some 3 ms a
// claim on five partitions, more than a small claim; so claimPlanning
// also keeps PostgreSQL from doing so. Left to choose, it did: it judged
// the generic plan by the frontier's bound, which it cannot know, as
// dearer than a custom one, and planned every claim afresh (a quarter of
// the drain's throughput).
//
// Messages of the event types in $7 (NULL for none) are left alone: an
// operator paused them (see pauses), or their handler's dependency is
// unavailable (see outages). They stay pending, so a keyed one at the
// head of its key holds its key. The list is a parameter, read at most
// once per poll interval, so the claim reads no other table for it; it
// is a filter on the rows the pending index yields.
//
// Messages of the event types in $3 are leased: they become running under
// the claim token $2 with a lease of $4 ms, and are called after the batch
// commits. Every other message is marked done, in anticipation: a handler
// that fails has its outcome written over it before the commit.
const claimSQL = `
WITH rescued AS (
    SELECT i.tableoid, i.ctid, i.bucket
    FROM /* schema */inbox AS i
    WHERE $5 AND i.consumer = $1 AND i.status = ` + tables.InboxRunning + ` AND i.available_at <= now()
      AND ` + claimSkipped + `
    ORDER BY i.available_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
fresh AS (
    SELECT i.tableoid, i.ctid, i.bucket, i.available_at
    FROM /* schema */inbox AS i
    WHERE i.consumer = $1
      AND i.status = ` + tables.InboxPending + `
      AND i.available_at <= now() AND i.available_at >= coalesce($8::timestamptz, '-infinity')
      AND NOT EXISTS (SELECT 1 FROM rescued)
      AND ` + claimSkipped + `
      AND ` + tables.InboxAtKeyHead + `
    ORDER BY i.available_at, i.seq
    LIMIT /* batch */
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    SELECT r.tableoid, r.ctid, r.bucket FROM rescued AS r
    UNION ALL
    SELECT f.tableoid, f.ctid, f.bucket FROM fresh AS f
)
UPDATE /* schema */inbox AS i SET
    status       = CASE WHEN ` + claimSpent + ` THEN ` + tables.InboxDead + `
                        WHEN ` + claimLeased + ` THEN ` + tables.InboxRunning + `
                        ELSE ` + tables.InboxDone + ` END,
    attempts     = CASE WHEN ` + claimSpent + ` THEN i.attempts ELSE i.attempts + 1 END,
    claim_token  = $2,
    available_at = CASE WHEN NOT ` + claimSpent + ` AND ` + claimLeased + `
                        THEN now() + $4 * interval '1 millisecond' ELSE i.available_at END,
    processed_at = CASE WHEN NOT ` + claimSpent + ` AND NOT ` + claimLeased + `
                        THEN now() ELSE i.processed_at END,
    last_error   = CASE WHEN ` + claimUnrecorded + ` THEN $6 ELSE i.last_error END,
    errors       = CASE WHEN ` + claimUnrecorded + `
                        THEN i.errors || jsonb_build_array(jsonb_build_object('attempt', i.attempts, 'at', now(), 'error', $6::text))
                        ELSE i.errors END
WHERE i.ctid = ANY (ARRAY(SELECT c.ctid FROM claimed AS c))
  AND (i.bucket BETWEEN (SELECT min(c.bucket) FROM claimed AS c WHERE c.bucket > 0)
                    AND (SELECT max(c.bucket) FROM claimed AS c WHERE c.bucket > 0)
       OR i.bucket BETWEEN (SELECT min(c.bucket) FROM claimed AS c WHERE c.bucket <= 0)
                       AND (SELECT max(c.bucket) FROM claimed AS c WHERE c.bucket <= 0))
  AND (i.tableoid, i.ctid) IN (SELECT c.tableoid, c.ctid FROM claimed AS c)
RETURNING i.message_id, i.status, i.event_type, i.payload, i.metadata, coalesce(i.ordering_key, ''),
          i.attempts, i.max_attempts, i.received_at, i.seq, EXISTS (SELECT 1 FROM rescued), pg_current_xact_id()::text, i.bucket,
          (SELECT min(f.available_at) FROM fresh AS f)`

// claimSpent and claimUnrecorded are true, in claimSQL's update, for a
// rescued row (the only running one it claims) whose lost attempt was its
// last, and for one whose lost attempt was never recorded; claimLeased for
// a row whose event type is leased ($3, NULL when none is); claimSkipped,
// in its selects, for a row whose event type is not to be claimed ($7).
const (
	claimLeased     = `coalesce(i.event_type = ANY($3::text[]), false)`
	claimSkipped    = `NOT coalesce(i.event_type = ANY($7::text[]), false)`
	claimSpent      = `(i.status = ` + tables.InboxRunning + ` AND i.attempts >= i.max_attempts)`
	claimUnrecorded = `(i.status = ` + tables.InboxRunning + ` AND i.claim_token IS NOT NULL)`
)

// recordClaimSQL records that batch transaction $2 of consumer $1 claimed
// messages $3 and is about to run their handlers. It runs in a session of
// its own, committing before any handler runs, and returns whether it
// recorded the claim and whether a lost batch is waiting to be reconciled.
//
// It refuses, recording nothing, when a claim of this consumer whose
// transaction aborted has not been reconciled yet (but for the claims of
// $4, the batches this process holds and settles itself, see claimrec.Held): its messages may be in
// this very batch, pending again with their lost attempt uncounted, and
// would otherwise run with neighbours instead of alone. It refuses too when
// $2 is no longer running: the batch's transaction was ended under the
// worker (say, by the server after a stall), and its handlers must not run.
//
// On the way it sweeps away the claims of batches that committed (a
// transaction too old for its status to be known did too: an aborted one
// is reconciled long before). It skips rows another worker is sweeping, so
// it never waits.
//
// The record commits asynchronously, like a claim of River's: it is
// visible to every session at once and survives the death of this process;
// only a server crash can lose it, and that loses the batch transaction
// (and its handlers' writes) too.
const recordClaimSQL = `
WITH stale AS (
    SELECT 1 FROM /* schema */inbox_claims
    WHERE consumer = $1 AND pg_xact_status(xid) = 'aborted' AND xid <> ALL ($4::text[]::xid8[])
    LIMIT 1
),
finished AS (
    DELETE FROM /* schema */inbox_claims
    WHERE ctid IN (SELECT ctid FROM /* schema */inbox_claims
                   WHERE consumer = $1 AND coalesce(pg_xact_status(xid), 'committed') = 'committed'
                   FOR UPDATE SKIP LOCKED)
),
async AS (
    SELECT set_config('synchronous_commit', 'off', true)
),
recorded AS (
    INSERT INTO /* schema */inbox_claims (consumer, xid, message_ids)
    SELECT $1, $2::text::xid8, $3::text[]
    FROM async
    WHERE NOT EXISTS (SELECT 1 FROM stale) AND pg_xact_status($2::text::xid8) = 'in progress'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM recorded), EXISTS (SELECT 1 FROM stale)`

// reconcileSQL counts the attempts of consumer $1's lost batches: claims
// recorded by transactions that aborted, but for those of $4 (the
// batches this process holds and settles itself, see claimrec.Held). Each of their messages still
// pending or running gets its attempt counted and recorded in its history
// (with the leased attempt before it, if that was lost unrecorded too, see
// claimSQL), and is then either dead, if that was its last attempt, or
// running with an expired lease and no claim token: rescued alone by the
// next claim, without recording anything again.
//
// Deleting the claim and updating its messages is one statement, so two
// workers reconciling at once count each attempt once: the second finds
// the claim gone.
const reconcileSQL = `
WITH lost_batches AS (
    DELETE FROM /* schema */inbox_claims
    WHERE consumer = $1 AND pg_xact_status(xid) = 'aborted' AND xid <> ALL ($4::text[]::xid8[])
    RETURNING message_ids, claimed_at
),
lost AS (
    SELECT DISTINCT ON (id) id, claimed_at
    FROM lost_batches, unnest(message_ids) AS id
    ORDER BY id, claimed_at
)
UPDATE /* schema */inbox AS i SET
    attempts     = i.attempts + 1,
    status       = CASE WHEN i.attempts + 1 >= i.max_attempts THEN ` + tables.InboxDead + ` ELSE ` + tables.InboxRunning + ` END,
    available_at = now(),
    claim_token  = NULL,
    last_error   = $2,
    errors       = i.errors
        || CASE WHEN i.status = ` + tables.InboxRunning + ` AND i.claim_token IS NOT NULL
                THEN jsonb_build_array(jsonb_build_object('attempt', i.attempts, 'at', l.claimed_at, 'error', $3::text))
                ELSE '[]'::jsonb END
        || jsonb_build_array(jsonb_build_object('attempt', i.attempts + 1, 'at', l.claimed_at, 'error', $2::text))
FROM lost AS l
WHERE i.consumer = $1 AND i.message_id = l.id AND i.status IN (` + tables.InboxPending + `, ` + tables.InboxRunning + `)
RETURNING i.message_id, i.event_type, i.attempts, i.status`

// renewLeaseSQL restarts the lease of claimed messages ($2, in buckets
// $5) that are still this worker's, and returns how many it renewed: just
// before a leased handler runs (one id: is the claim still ours?), and
// periodically for a batch's leased messages still waiting their turn.
const renewLeaseSQL = `
UPDATE /* schema */inbox AS i SET available_at = now() + $4 * interval '1 millisecond'
FROM unnest($2::text[], $5::int[]) AS m(message_id, bucket)
WHERE i.consumer = $1 AND i.message_id = m.message_id AND i.bucket = m.bucket
  AND i.claim_token = $3 AND i.status = ` + tables.InboxRunning

// byKeyMode returns the query mode of the statements that find claimed
// messages again by their key (completeSQL, settleSQL, reconcileSQL), given
// the pool's: one that plans them for their arguments at each execution.
//
// A prepared statement's generic plan is made once per connection, with
// each partition at the size it had then. Made while the partition of
// undated ids, or today's, was small, completeSQL's hash-joined the
// outcomes to every message of the consumer in it, and went on reading
// them all (done ones included, 20,000 of them in
// TestCompletionsReadOnlyTheirMessages) at each completion as it grew.
// These statements run on failures, leased batches and crashes, not per
// message, so they can afford their planning (some 0.4 ms), and a plan
// made for the arguments probes each message's key. The claim, which runs
// for every batch, takes the other way (claimSQL).
//
// The pool's default statement cache is the one mode that keeps generic
// plans: it gives way to the statement description cache, which sends the
// statement unnamed, in one round trip, as a transaction pooler allows.
// Every other mode already plans each execution, and is kept.
func byKeyMode(pool pgx.QueryExecMode) pgx.QueryExecMode {
	if pool == pgx.QueryExecModeCacheStatement {
		return pgx.QueryExecModeCacheDescribe
	}
	return pool
}

// completeSQL records outcomes other than the anticipated one, in one
// statement, fenced by the claim token: in the batch transaction, for
// in-transaction messages that failed or were given back; afterwards, for
// leased messages. An outcome is done; pending again after a backoff (a
// failure) or a snooze; dead; or released (pending now, the attempt
// refunded) when the dispatcher stopped before finishing it. An
// in-transaction message that the claim marked done, with its processed_at,
// and that did not end done has that processed_at taken back. Each failure
// appends {attempt, at, error, trace} to the row's history. Due times are
// the database's now() plus a delay, never a worker's clock.
const completeSQL = `
UPDATE /* schema */inbox AS i SET
    status       = o.status,
    attempts     = i.attempts - o.refund,
    available_at = CASE WHEN o.status = ` + tables.InboxPending + ` THEN now() + o.delay_ms * interval '1 millisecond' ELSE i.available_at END,
    processed_at = CASE WHEN o.status = ` + tables.InboxDone + ` THEN now()
                        WHEN i.status = ` + tables.InboxDone + ` THEN NULL -- the claim's anticipation, taken back
                        ELSE i.processed_at END,
    claim_token  = CASE WHEN o.status = ` + tables.InboxPending + ` THEN NULL ELSE i.claim_token END,
    last_error   = coalesce(o.error, i.last_error),
    errors       = CASE WHEN o.error IS NULL THEN i.errors
                        ELSE i.errors || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                            'attempt', i.attempts, 'at', now(), 'error', o.error, 'trace', o.trace))) END
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::int[], $7::text[], $8::text[], $9::int[])
    AS o(message_id, status, delay_ms, refund, error, trace, bucket)
WHERE i.consumer = $1 AND i.message_id = o.message_id AND i.bucket = o.bucket AND i.claim_token = $2 AND i.status IN (` + tables.InboxRunning + `, ` + tables.InboxDone + `)`

// settleSQL records the failures of a batch whose transaction failed as a
// whole after its handlers ran (a handler broke the connection, the commit
// failed): the transaction's writes are gone, so the messages are as
// before the claim, pending with the attempt uncounted. It takes back the
// batch's claim record $2, then counts each failed attempt and records it;
// messages with no outcome here simply run again. If the record is already
// gone (another worker reconciled it), the attempts were counted there and
// nothing is done twice.
const settleSQL = `
WITH mine AS (
    DELETE FROM /* schema */inbox_claims WHERE consumer = $1 AND xid = $2::text::xid8
    RETURNING 1
)
UPDATE /* schema */inbox AS i SET
    status       = o.status,
    attempts     = i.attempts + 1,
    available_at = CASE WHEN o.status = ` + tables.InboxPending + ` THEN now() + o.delay_ms * interval '1 millisecond' ELSE i.available_at END,
    claim_token  = NULL,
    last_error   = o.error,
    errors       = i.errors || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                       'attempt', i.attempts + 1, 'at', now(), 'error', o.error, 'trace', o.trace)))
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[])
    AS o(message_id, status, delay_ms, error, trace)
WHERE EXISTS (SELECT 1 FROM mine) AND i.consumer = $1 AND i.message_id = o.message_id AND i.status = ` + tables.InboxPending

// dueSQL reads the backlog for the stall watchdog (workloop): how many
// messages are pending, counted up to $2, and how long the oldest that a
// claim could take now (due, and unkeyed or at the head of its key) has
// been due, or 0. A message held behind an earlier one of its key waits
// for that one, which a backing-off head makes a wait for time, not a
// stall. Nor is a message the claim leaves alone due: none when $3 (the
// whole consumer is paused), and none of the event types in $4 (paused,
// or backing off in an outage). It reads the pending index in
// available_at order and stops at the first claimable message.
const dueSQL = `
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM /* schema */inbox AS i
            WHERE i.consumer = $1 AND i.status = ` + tables.InboxPending + `
            LIMIT $2) AS w),
       coalesce((
            SELECT extract(epoch FROM now() - i.available_at)
            FROM /* schema */inbox AS i
            WHERE i.consumer = $1 AND i.status = ` + tables.InboxPending + ` AND i.available_at <= now()
              AND NOT $3::bool AND NOT coalesce(i.event_type = ANY($4::text[]), false)
              AND ` + tables.InboxAtKeyHead + `
            ORDER BY i.available_at
            LIMIT 1), 0)::float8`
