package maintenance

import "github.com/pgbox/pgbox/internal/tables"

// The maintenance jobs' SQL. "/* schema */" is replaced by the quoted
// schema name when a Maintainer is created (ident.Render).
//
// Each prune statement deletes up to $2 rows older than $1 milliseconds,
// oldest first, from the cursor $3 on, and returns how many it deleted and
// the newest time among them: the next batch's cursor. Walking forward
// from the cursor matters on a big table: the rows earlier batches deleted
// stay in the index as dead entries until vacuum, and while any
// transaction is older than the deletes (a long report, a busy
// dispatcher), every batch that started from the beginning would step over
// all of them again. With the cursor each batch reads only its own rows
// (and the few that share the cursor's time). SKIP LOCKED leaves a row that
// someone holds to the next run.

// pruneInboxSQL deletes done messages of the inbox's partition part by
// processed_at, through its inbox_done_idx. Only done rows: pending,
// running, dead and discarded ones are never deleted here. Only the
// default partition is pruned so: the others go whole when they expire
// (internal/partition).
func pruneInboxSQL(part string) string {
	return `
WITH batch AS (
    SELECT consumer, message_id, processed_at FROM /* schema */` + part + `
    WHERE status = ` + tables.InboxDone + ` AND processed_at < now() - $1 * interval '1 millisecond' AND processed_at >= $3
    ORDER BY processed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM /* schema */` + part + ` AS i USING batch AS b
    WHERE i.consumer = b.consumer AND i.message_id = b.message_id
    RETURNING b.processed_at AS at
)
SELECT count(*), coalesce(max(at), $3) FROM deleted`
}

// pruneConflictsSQL deletes conflict records by received_at, through
// inbox_conflicts_received_idx. The table has no key: ctid names the rows.
const pruneConflictsSQL = `
WITH batch AS (
    SELECT ctid, received_at FROM /* schema */inbox_conflicts
    WHERE received_at < now() - $1 * interval '1 millisecond' AND received_at >= $3
    ORDER BY received_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM /* schema */inbox_conflicts AS c USING batch AS b
    WHERE c.ctid = b.ctid
    RETURNING b.received_at AS at
)
SELECT count(*), coalesce(max(at), $3) FROM deleted`

// pruneOutboxSQL deletes published rows of the outbox's partition part
// by published_at, through its outbox_published_idx. Dead and unpublished
// rows are never deleted. Only the partitions no drop takes are pruned so:
// the undated rows (ids of the producer's that are no UUIDv7, and every
// row older than migration 9) and the default partition.
func pruneOutboxSQL(part string) string {
	return `
WITH batch AS (
    SELECT id, published_at FROM /* schema */` + part + `
    WHERE status = ` + tables.OutboxPublished + ` AND published_at < now() - $1 * interval '1 millisecond' AND published_at >= $3
    ORDER BY published_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM /* schema */` + part + ` AS o USING batch AS b
    WHERE o.id = b.id
    RETURNING b.published_at AS at
)
SELECT count(*), coalesce(max(at), $3) FROM deleted`
}

// pruneKeysSQL deletes idempotency keys that expired more than $1
// milliseconds ago (0: expired at all) and that no request holds, by
// expires_at, through idempotency_keys_expires_idx. Expired keys are
// already treated as new by package idempotency, so this only reclaims
// space.
const pruneKeysSQL = `
WITH batch AS (
    SELECT route, caller, key, expires_at FROM /* schema */idempotency_keys
    WHERE expires_at <= now() - $1 * interval '1 millisecond' AND expires_at >= $3
      AND ` + tables.IdempotencyKeyFree + `
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM /* schema */idempotency_keys AS k USING batch AS b
    WHERE k.route = b.route AND k.caller = b.caller AND k.key = b.key
    RETURNING b.expires_at AS at
)
SELECT count(*), coalesce(max(at), $3) FROM deleted`

// pruneProcessesSQL deletes the rows of processes not seen for $1
// milliseconds (they died without a clean Stop; a live process touches its
// row every heartbeat, and writes it back if it was pruned after a long
// pause), by last_seen_at, through processes_last_seen_idx.
const pruneProcessesSQL = `
WITH batch AS (
    SELECT id, last_seen_at FROM /* schema */processes
    WHERE last_seen_at < now() - $1 * interval '1 millisecond' AND last_seen_at >= $3
    ORDER BY last_seen_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM /* schema */processes AS p USING batch AS b
    WHERE p.id = b.id
    RETURNING b.last_seen_at AS at
)
SELECT count(*), coalesce(max(at), $3) FROM deleted`
