package relay

import (
	"github.com/pgbox/pgbox/internal/frontier"
	"github.com/pgbox/pgbox/internal/tables"
)

// The relay's SQL. "/* schema */" is replaced by the quoted schema name
// when a Relay is created (ident.Render).
//
// A batch is claimed and recorded in one transaction, held open while its
// rows are published (beginBatch). claimSQL only locks the rows; one
// UPDATE (completeSQL) then records what became of each, and the commit
// makes it visible: one write per row, where a claim that marked rows
// running and a completion that marked them published made two. The row
// locks keep every other relay off the rows until the transaction ends;
// if it dies (the process crashed, the connection was cut, the server
// ended a stalled transaction), the rows are claimable again at once.
//
// What must outlive such a death is the attempt, so that a row that kills
// its relay each time ends dead instead of crash-looping: recordClaimSQL
// records the batch from another session, sent before it is published,
// one row per batch in outbox_claims, and reconcileSQL turns the rows of
// transactions that aborted into counted, recorded, lost attempts.

// beginBatch begins a batch transaction, one statement each as a pipeline
// needs (with the claim, in one round trip), ended by the server if it
// stays idle for a lease (%d, in milliseconds): a relay that stalls
// (paused, cut off by the network) with its batch open lets the rows go as
// if it had crashed. A live relay is never idle that long: its publishing
// ends three quarters into the lease (round.deadline).
var beginBatch = []string{"BEGIN", "SET LOCAL idle_in_transaction_session_timeout = %d"}

// openSinceSQL follows BEGIN in a claim's round trip: frontier.OpenSinceSQL
// and beginBatch's idle timeout (%d, in milliseconds) in one statement,
// where a pipeline takes one each; and the session's statement timeout,
// which a TxPublisher's publishing shortens (publishTimeoutSQL) and the
// completion restores (completePlanning).
const openSinceSQL = `SELECT (` + frontier.OpenSinceSQL + `), set_config('idle_in_transaction_session_timeout', '%d', true),
    current_setting('statement_timeout')`

// completePlanning is how completeSQL is planned: set in its transaction,
// in the same round trip, in one statement (seven SET LOCALs would cost
// the server seven: a pipeline takes one each). With no
// scan left but TID probes, its plan reads the outbox by its rows' ctids
// only, however small the planner thinks a partition; a plan left to
// choose, made while today's partition was small, read it whole (its
// primary key's every entry) at each completion as it grew. And it
// hash-joins the outcomes to the rows, where a generic plan, guessing ten
// outcomes, compared each outcome with each row. The sequential scan of
// outbox_claims (a few rows, no index) is costed as disabled, which would
// put the plan past jit_above_cost: JIT compiling it took some 400 ms a
// completion, hence jit off. The batch transaction runs nothing after it.
// It also restores the session's statement timeout ($1), which a
// TxPublisher's publishing shortens (publishTimeoutSQL).
const completePlanning = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
    set_config('enable_indexscan', 'off', true), set_config('enable_indexonlyscan', 'off', true),
    set_config('enable_nestloop', 'off', true), set_config('enable_mergejoin', 'off', true),
    set_config('jit', 'off', true), set_config('statement_timeout', $1, true)`

// publishTimeoutSQL bounds each statement of a TxPublisher's publishing,
// the batch transaction's from the claim on, by PublishTimeout ($1, in
// milliseconds), until completePlanning restores the session's: a
// statement that waits on a lock, as it runs or as pgx prepares it, is
// ended by the server (execPublish).
const publishTimeoutSQL = `SELECT set_config('statement_timeout', $1, true)`

// claimSQL locks up to $1 outbox rows to publish, in the batch
// transaction, and returns them. Rows are
// claimed by status, never by "id greater than the last one seen": a
// transaction that took a lower id but committed later is published all
// the same.
//
// Claimable means pending, due and, if keyed, at the head of its key: no
// earlier row of the key pending, running or dead (tables.OutboxAtKeyHead).
// A row being published is still pending to everyone else until its batch
// commits, so the next row of its key is not at the head; and it is
// locked, so SKIP LOCKED passes it by. That keeps one row per key in
// flight across every relay process, in commit order.
//
// Fresh rows are found from the frontier $2 on (see package frontier;
// NULL reads the pending index from its start); each row comes with its
// available_at, to move the frontier on, and its created_at, to rewind it
// to once a keyed row is published. Each row's attempt is the one being
// made: attempts + 1. Each comes with where it is (ctid, and bucket: its
// partition), for completeSQL to find it again: a row locked by the
// transaction cannot move. The transaction's id comes after, from
// staleClaimsSQL.
const claimSQL = `
SELECT o.ctid::text, o.bucket, o.id, o.topic, o.event_type, coalesce(o.ordering_key, ''), o.payload, o.metadata, o.attempts + 1, o.seq, o.created_at, o.available_at
FROM /* schema */outbox AS o
WHERE o.status = ` + tables.OutboxPending + `
  AND o.available_at <= now() AND o.available_at >= coalesce($2::timestamptz, '-infinity')
  AND ` + tables.OutboxAtKeyHead + `
ORDER BY o.available_at, o.seq
LIMIT $1
FOR UPDATE SKIP LOCKED`

// recordClaimSQL records that batch transaction $1 claimed rows $2 and is
// about to publish them. It runs in a session of its own. The worker sends
// it before it publishes, and reads its answer after (runBatch): once
// sent, it is the server's to run and commit, whatever becomes of the
// relay, and it records the claim even if the batch transaction has ended
// meanwhile (the relay was killed as it published, and its transaction
// aborted): that is the attempt to count. Lost attempts that wait to be
// counted, whose rows may be in the batch, are looked for in the claim's
// round trip instead (staleClaimsSQL).
//
// On the way it sweeps away the claims of batches that committed without
// deleting theirs (a transaction too old for its status to be known did
// too: an aborted one is reconciled long before). It skips rows another
// worker is sweeping, so it never waits.
//
// The record commits asynchronously: it is visible to every session at
// once and survives the death of this process; only a server crash can
// lose it, and that aborts the batch transaction too.
const recordClaimSQL = `
WITH finished AS (
    DELETE FROM /* schema */outbox_claims
    WHERE ctid IN (SELECT ctid FROM /* schema */outbox_claims
                   WHERE coalesce(pg_xact_status(xid), 'committed') = 'committed'
                   FOR UPDATE SKIP LOCKED)
),
async AS (
    SELECT set_config('synchronous_commit', 'off', true)
)
INSERT INTO /* schema */outbox_claims (xid, ids)
SELECT $1::text::xid8, $2::text[]::uuid[]
FROM async`

// staleClaimsSQL returns the batch transaction's id, NULL if the claim
// took no row (and so wrote nothing: an idle claim takes no transaction
// id), and whether lost attempts wait to be counted (see
// reconcileSQL): a claim whose transaction aborted, but for the batches of
// $1, which this process settles itself (see claimrec.Held), or a row an
// older relay marked running whose lease expired.
//
// It runs in the claim's round trip, after the claim: the rows of lost
// attempts may be in the batch, pending again with their attempt
// uncounted, and are then counted first and claimed again, so that a row
// that kills its relay each time ends dead. A claimed row was locked only
// once the batch that held it before had ended, and an aborted
// transaction is known aborted (pg_xact_status) before its locks go; its
// claim record was sent before it published. A claim that takes nothing
// looks too: the rows of lost attempts may be all there is (a row an older
// relay left running is never claimed).
const staleClaimsSQL = `
SELECT pg_current_xact_id_if_assigned()::text, EXISTS (
    SELECT 1 FROM /* schema */outbox_claims
    WHERE pg_xact_status(xid) = 'aborted' AND xid <> ALL ($1::text[]::xid8[])
    UNION ALL
    SELECT 1 FROM /* schema */outbox AS o
    WHERE o.status = ` + tables.OutboxRunning + ` AND o.available_at <= now()
    LIMIT 1)`

// reconcileSQL counts lost attempts: those of the claims recorded by
// transactions that aborted, but for those of $1 (the batches this process
// holds and settles itself, see claimrec.Held), and those of rows an older
// relay marked running whose lease expired. Each of a lost claim's rows
// still pending gets its attempt counted and recorded in its history ($2),
// and is then dead, if that was attempt $3 (when positive), or pending.
// A running row with an expired lease had its attempt counted when it was
// claimed: it is recorded ($4) and made pending, or dead if it was attempt
// $3. It returns each row's id, topic, attempts and new status.
//
// Deleting the claim and updating its rows is one statement, so two
// relays reconciling at once count each attempt once: the second finds
// the claim gone.
const reconcileSQL = `
WITH lost_batches AS (
    DELETE FROM /* schema */outbox_claims
    WHERE pg_xact_status(xid) = 'aborted' AND xid <> ALL ($1::text[]::xid8[])
    RETURNING ids, claimed_at
),
lost AS (
    SELECT DISTINCT ON (id) id, claimed_at
    FROM lost_batches, unnest(ids) AS id
    ORDER BY id, claimed_at
),
counted AS (
    UPDATE /* schema */outbox AS o SET
        attempts   = o.attempts + 1,
        status     = CASE WHEN $3 > 0 AND o.attempts + 1 >= $3 THEN ` + tables.OutboxDead + ` ELSE ` + tables.OutboxPending + ` END,
        last_error = $2,
        errors     = o.errors || jsonb_build_array(jsonb_build_object('attempt', o.attempts + 1, 'at', l.claimed_at, 'error', $2::text))
    FROM lost AS l
    WHERE o.id = l.id AND o.bucket IN (0, /* schema */outbox_bucket(l.id)) AND o.status = ` + tables.OutboxPending + `
    RETURNING o.id, o.topic, o.attempts, o.status
),
expired AS (
    UPDATE /* schema */outbox AS o SET
        status       = CASE WHEN $3 > 0 AND o.attempts >= $3 THEN ` + tables.OutboxDead + ` ELSE ` + tables.OutboxPending + ` END,
        available_at = now(),
        claim_token  = NULL,
        last_error   = $4,
        errors       = o.errors || jsonb_build_array(jsonb_build_object('attempt', o.attempts, 'at', now(), 'error', $4::text))
    WHERE o.status = ` + tables.OutboxRunning + ` AND o.available_at <= now()
    RETURNING o.id, o.topic, o.attempts, o.status
)
SELECT * FROM counted
UNION ALL
SELECT * FROM expired`

// completeSQL records what became of each row of batch $1, and deletes the
// batch's claim record. A row is published unless it is among the
// exceptions ($9 to $13, by seq: most batches have none): pending again
// after a backoff (a failed publish); dead; or handed back (pending, the
// attempt not counted) to be published again after a delay, or at once.
// It returns what recordedSQL does.
//
// It finds each row ($2, by seq) where the claim found it: by TID probes
// ($3, the rows' ctids) in the partitions of the rows' buckets' ranges only
// (dated ones, $5 to $6, and undated ones, $7 to $8, apart, so that a batch
// holding both does not probe the days between; an empty range where
// there are none). It always runs with completePlanning's settings.
//
// It runs in the batch transaction, which holds the rows; and, should
// that transaction have been cut (a database outage) before it committed,
// again in a transaction of its own once the database is back. Its
// fences make the second run record nothing twice and nothing taken over:
// a row is recorded only as it was claimed (the same row version and seq,
// pending, with the attempts of $4), and, outside the batch transaction,
// only while the batch's claim record is still there; another relay that
// found the batch lost has deleted the record and counted the attempts
// itself. In the batch transaction (its id is $1) the row locks are fence
// enough: no relay takes over a batch whose transaction runs, so a claim
// record that failed does not keep the published rows from being
// recorded.
const completeSQL = `
WITH mine AS (
    DELETE FROM /* schema */outbox_claims WHERE xid = $1::text::xid8
    RETURNING 1
),
x AS (
    SELECT * FROM unnest($9::bigint[], $10::text[], $11::bigint[], $12::int[], $13::text[]) AS x(seq, status, delay_ms, refund, error)
),
recorded AS (
    UPDATE /* schema */outbox AS o SET
        status       = coalesce(x.status, ` + tables.OutboxPublished + `),
        attempts     = o.attempts + 1 - coalesce(x.refund, 0),
        published_at = CASE WHEN x.seq IS NULL THEN now() ELSE o.published_at END,
        available_at = CASE WHEN x.status = ` + tables.OutboxPending + ` THEN now() + x.delay_ms * interval '1 millisecond' ELSE o.available_at END,
        last_error   = coalesce(x.error, o.last_error),
        errors       = CASE WHEN x.error IS NULL THEN o.errors
                            ELSE o.errors || jsonb_build_array(jsonb_build_object('attempt', o.attempts + 1, 'at', now(), 'error', x.error)) END
    FROM unnest($2::bigint[], $3::text[]::tid[], $4::int[]) AS r(seq, ctid, attempts)
         LEFT JOIN x ON x.seq = r.seq
    WHERE o.ctid = ANY ($3::text[]::tid[])
      AND (o.bucket BETWEEN $5 AND $6 OR o.bucket BETWEEN $7 AND $8)
      AND o.ctid = r.ctid AND o.seq = r.seq
      AND o.status = ` + tables.OutboxPending + ` AND o.attempts = r.attempts
      AND (pg_current_xact_id_if_assigned() = $1::text::xid8 OR EXISTS (SELECT 1 FROM mine))
    RETURNING o.status, o.topic
)
` + recordedSQL

// recordedSQL ends completeSQL and chargeSQL, whose CTE "recorded" returns
// each row it recorded, with its new status and topic: it returns how many
// it recorded, and the topics of those recorded dead, for their metric.
const recordedSQL = `SELECT count(*), coalesce(array_agg(topic) FILTER (WHERE status = ` + tables.OutboxDead + `), '{}') FROM recorded`

// chargeSQL charges rows their failed publish after the fact: rows handed
// back uncharged from a round in doubt (a call failed unreachable or hung
// after others of the round reached the broker), once a later round found
// the broker reachable, so that the failure was their own. Each is
// charged an attempt, as completeSQL charges a failure: pending after a
// backoff, or dead. The fence is the row as the hand-back left it:
// pending, with the attempts it had then ($4); a row claimed again since,
// and not handed back, is left alone, and so is a row a batch is
// publishing again right now (locked): it is being retried anyway. It
// returns what recordedSQL does.
const chargeSQL = `
WITH r AS (
    SELECT r.*
    FROM unnest($1::text[]::uuid[], $2::text[], $3::bigint[], $4::int[], $5::text[], $6::int[]) AS r(id, status, delay_ms, attempts, error, bucket)
    JOIN /* schema */outbox AS o ON o.id = r.id AND o.bucket = r.bucket
    WHERE o.status = ` + tables.OutboxPending + ` AND o.attempts = r.attempts
    FOR UPDATE OF o SKIP LOCKED
),
recorded AS (
    UPDATE /* schema */outbox AS o SET
        status       = r.status,
        attempts     = o.attempts + 1,
        available_at = CASE WHEN r.status = ` + tables.OutboxPending + ` THEN now() + r.delay_ms * interval '1 millisecond' ELSE o.available_at END,
        last_error   = r.error,
        errors       = o.errors || jsonb_build_array(jsonb_build_object('attempt', o.attempts + 1, 'at', now(), 'error', r.error))
    FROM r
    WHERE o.id = r.id AND o.bucket = r.bucket AND o.status = ` + tables.OutboxPending + ` AND o.attempts = r.attempts
    RETURNING o.status, o.topic
)
` + recordedSQL

// dueSQL reads the backlog for the stall watchdog (workloop): how many rows
// are not yet published (pending or being published), counted up to $1,
// and how long the oldest that a claim could take now (due, and unkeyed or
// at the head of its key) has been due, or 0. A row held behind an earlier
// one of its key waits for that one, which a backing-off head makes a wait
// for time, not a stall. It reads the pending index in available_at order
// and stops at the first claimable row.
const dueSQL = `
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM /* schema */outbox AS o WHERE o.status = ` + tables.OutboxRunning + `
            UNION ALL
            SELECT 1 FROM /* schema */outbox AS o WHERE o.status = ` + tables.OutboxPending + `
            LIMIT $1) AS w),
       coalesce((
            SELECT extract(epoch FROM now() - o.available_at)
            FROM /* schema */outbox AS o
            WHERE o.status = ` + tables.OutboxPending + ` AND o.available_at <= now()
              AND ` + tables.OutboxAtKeyHead + `
            ORDER BY o.available_at
            LIMIT 1), 0)::float8`
