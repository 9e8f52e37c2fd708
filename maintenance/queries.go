package maintenance

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

// pruneInboxSQL deletes done messages by processed_at, through
// inbox_done_idx. Only done rows: pending, running, dead and discarded
// ones are never deleted here.
const pruneInboxSQL = `
WITH batch AS (
    SELECT consumer, message_id, processed_at FROM /* schema */inbox
    WHERE status = 'done' AND processed_at < now() - $1 * interval '1 millisecond' AND processed_at >= $3
    ORDER BY processed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM /* schema */inbox AS i USING batch AS b
    WHERE i.consumer = b.consumer AND i.message_id = b.message_id
    RETURNING b.processed_at AS at
)
SELECT count(*), coalesce(max(at), $3) FROM deleted`

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

// pruneOutboxSQL deletes published outbox rows by published_at, through
// outbox_published_idx. Dead and unpublished rows are never deleted.
const pruneOutboxSQL = `
WITH batch AS (
    SELECT id, published_at FROM /* schema */outbox
    WHERE status = 'published' AND published_at < now() - $1 * interval '1 millisecond' AND published_at >= $3
    ORDER BY published_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM /* schema */outbox AS o USING batch AS b
    WHERE o.id = b.id
    RETURNING b.published_at AS at
)
SELECT count(*), coalesce(max(at), $3) FROM deleted`
