package relay

import "github.com/pgbox/pgbox/internal/tables"

// The relay's SQL. "/* schema */" is replaced by the quoted schema name
// when a Relay is created (ident.Render).

// claimSQL takes up to $1 outbox rows to publish, in one autocommitted
// statement. Rows are claimed by status, never by "id greater than the last
// one seen": a transaction that took a lower id but committed later is
// published all the same.
//
// Claimable means a row whose lease expired (a relay died or stalled while
// publishing it: the attempt is recorded, and counted) or a pending row that
// is due and, if keyed, at the head of its key: no earlier row of the key
// pending, running or dead (tables.OutboxAtKeyHead). That keeps one row per
// key in flight across every relay process, in commit order. With $5 > 0, a row whose lease
// expired on attempt $5 is marked dead instead of claimed.
//
// Fresh rows are found from the frontier $6 on (see package frontier;
// NULL reads the pending index from its start), and each returned row
// carries the oldest available_at among them, to move the frontier on,
// and its created_at, to rewind it to once a keyed row is published.
//
// The update finds each claimed row again by its key, bucket included, so
// that only its own partition is read (the outbox is partitioned, see
// migration 9).
//
// The claim commits asynchronously (synchronous_commit off for its own
// transaction only): visible at once and safe from this process's death,
// and made durable by the synchronous commit that records the publish. A
// database server crash in between loses only the claim's attempt count;
// the row is published again, which consumers dedupe.
const claimSQL = `
WITH expired AS (
    SELECT o.id, o.bucket
    FROM /* schema */outbox AS o
    WHERE o.status = ` + tables.OutboxRunning + ` AND o.available_at <= now()
    ORDER BY o.available_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
fresh AS (
    SELECT o.id, o.bucket, o.available_at
    FROM /* schema */outbox AS o
    WHERE o.status = ` + tables.OutboxPending + `
      AND o.available_at <= now() AND o.available_at >= coalesce($6::timestamptz, '-infinity')
      AND ` + tables.OutboxAtKeyHead + `
    ORDER BY o.available_at, o.seq
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
claimable AS (
    SELECT id, bucket FROM expired
    UNION ALL
    SELECT id, bucket FROM fresh
    LIMIT $1
),
async AS (
    SELECT set_config('synchronous_commit', 'off', true)
)
UPDATE /* schema */outbox AS o SET
    status       = CASE WHEN o.status = ` + tables.OutboxRunning + ` AND $5 > 0 AND o.attempts >= $5
                        THEN ` + tables.OutboxDead + ` ELSE ` + tables.OutboxRunning + ` END,
    attempts     = CASE WHEN o.status = ` + tables.OutboxRunning + ` AND $5 > 0 AND o.attempts >= $5
                        THEN o.attempts ELSE o.attempts + 1 END,
    claim_token  = $2,
    available_at = now() + $3 * interval '1 millisecond',
    last_error   = CASE WHEN o.status = ` + tables.OutboxRunning + ` THEN $4 ELSE o.last_error END,
    errors       = CASE WHEN o.status = ` + tables.OutboxRunning + `
                        THEN o.errors || jsonb_build_array(jsonb_build_object('attempt', o.attempts, 'at', now(), 'error', $4::text))
                        ELSE o.errors END
FROM claimable AS c CROSS JOIN async
WHERE o.id = c.id AND o.bucket = c.bucket
RETURNING o.id, o.status, o.topic, o.event_type, coalesce(o.ordering_key, ''), o.payload, o.metadata, o.attempts, o.seq, o.created_at,
          (SELECT min(f.available_at) FROM fresh AS f)`

// completeSQL records what became of each claimed row, fenced by the claim
// token: published; pending again after a backoff (a failed publish); dead;
// or released (pending now, the attempt refunded) when the relay stopped
// before publishing it. It returns each recorded row's new status and its
// topic, for the dead rows' metric. $7 holds each id's day (0 for an id
// that is no UUIDv7), so that only the row's partition is read: its day's
// (or the default one), or bucket 0, where ids that are no UUIDv7 and every
// row older than migration 9 are.
const completeSQL = `
UPDATE /* schema */outbox AS o SET
    status       = r.status,
    attempts     = o.attempts - r.refund,
    published_at = CASE WHEN r.status = ` + tables.OutboxPublished + ` THEN now() ELSE o.published_at END,
    available_at = CASE WHEN r.status = ` + tables.OutboxPending + ` THEN now() + r.delay_ms * interval '1 millisecond' ELSE o.available_at END,
    claim_token  = NULL,
    last_error   = coalesce(r.error, o.last_error),
    errors       = CASE WHEN r.error IS NULL THEN o.errors
                        ELSE o.errors || jsonb_build_array(jsonb_build_object('attempt', o.attempts, 'at', now(), 'error', r.error)) END
FROM unnest($2::uuid[], $3::text[], $4::bigint[], $5::int[], $6::text[], $7::int[]) AS r(id, status, delay_ms, refund, error, day)
WHERE o.id = r.id AND o.bucket IN (0, r.day) AND o.claim_token = $1 AND o.status = ` + tables.OutboxRunning + `
RETURNING o.status, o.topic`

// chargeSQL charges rows their failed publish after the fact: rows handed
// back uncharged from a round in doubt (a call failed unreachable or hung
// after others of the round reached the broker), once a later round found
// the broker reachable, so that the failure was their own. Each is
// charged an attempt, as completeSQL charges a failure: pending after a
// backoff, or dead. The fence is the row as the hand-back left it:
// pending, with the attempts it had then ($4); a row claimed again since,
// and not handed back, is left alone. It returns what completeSQL does.
const chargeSQL = `
UPDATE /* schema */outbox AS o SET
    status       = r.status,
    attempts     = o.attempts + 1,
    available_at = CASE WHEN r.status = ` + tables.OutboxPending + ` THEN now() + r.delay_ms * interval '1 millisecond' ELSE o.available_at END,
    last_error   = r.error,
    errors       = o.errors || jsonb_build_array(jsonb_build_object('attempt', o.attempts + 1, 'at', now(), 'error', r.error))
FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::int[], $5::text[], $6::int[]) AS r(id, status, delay_ms, attempts, error, day)
WHERE o.id = r.id AND o.bucket IN (0, r.day) AND o.status = ` + tables.OutboxPending + ` AND o.attempts = r.attempts
RETURNING o.status, o.topic`

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
