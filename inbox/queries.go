package inbox

import "github.com/pgbox/pgbox/internal/tables"

// The inbox's SQL. "/* schema */" is replaced by the quoted schema name when
// an Inbox is created (ident.Render).

// receiveSQL stores a batch of messages in one round trip and reports, per
// message, whether it was inserted and, if not, the payload hash already
// stored under its id.
//
//   - key_locks: receivers of the same ordering key take turns, through a
//     transaction-scoped advisory lock per key taken in a fixed order (so
//     two batches cannot deadlock on them).
//   - numbered: each message's arrival number (seq) is drawn in the batch's
//     order, and only once every key lock is held (numbered reads the
//     one-row aggregate of key_locks). So per key, seq order is commit order,
//     and the dispatcher, which runs a key's messages in seq order, can never
//     see a later message commit before an earlier one.
//   - inserted: ON CONFLICT DO NOTHING is the dedupe. When a concurrent
//     transaction is inserting the same id, PostgreSQL waits for it to end
//     and then skips (if it committed) or inserts (if it rolled back). Rows
//     go in in message id order, so two batches that share ids wait for each
//     other in the same order and cannot deadlock.
//   - notified: one NOTIFY for the statement, only if something new is
//     pending and the caller passed a channel (the Inbox folds its
//     notifications, see Config.NotifyInterval); it is delivered when the
//     surrounding transaction commits, never for a rolled-back one.
//   - the final SELECT returns nothing for an inserted message (most of
//     them), and for each other one its position in the batch and the
//     stored row's payload hash, so the caller can tell a redelivery from
//     a conflicting reuse of an id. The hash comes from a correlated
//     subquery on purpose: one primary-key probe per duplicate. (As a LEFT
//     JOIN, the planner hashed every stored row of the consumer, once per
//     batch: a scan of the whole dedupe memory per receive.) A row
//     committed by a concurrent transaction during this statement is not
//     visible to its snapshot; its hash comes back NULL and the caller
//     looks it up with hashSQL. A first row, position 0, is always there,
//     so that the notified CTE is always run.
const receiveSQL = `
WITH input AS (
    SELECT *
    FROM unnest($2::text[], $3::text[], $4::bytea[], $5::bytea[], $6::text[], $7::text[], $8::int[])
        WITH ORDINALITY AS m(message_id, event_type, payload, payload_hash, metadata, ordering_key, max_attempts, ord)
),
key_locks AS (
    SELECT count(*) AS n
    FROM (
        SELECT pg_advisory_xact_lock(k)
        FROM (SELECT DISTINCT hashtextextended($1 || '/' || ordering_key, 0) AS k
              FROM input WHERE ordering_key IS NOT NULL ORDER BY 1) AS keys
    ) AS locked
),
sequence AS (
    SELECT $11::text::regclass AS oid -- resolved once, not per row
),
numbered AS (
    SELECT m.*, nextval(s.oid) AS seq
    FROM input AS m CROSS JOIN key_locks CROSS JOIN sequence AS s
    ORDER BY m.ord
),
inserted AS (
    INSERT INTO /* schema */inbox AS i
        (seq, consumer, message_id, event_type, payload, payload_hash, metadata, ordering_key, max_attempts,
         status, attempts, processed_at)
    OVERRIDING SYSTEM VALUE
    SELECT n.seq, $1, n.message_id, n.event_type, n.payload, n.payload_hash, n.metadata::jsonb, n.ordering_key, n.max_attempts,
           $9, CASE WHEN $9 = ` + tables.InboxDone + ` THEN 1 ELSE 0 END, CASE WHEN $9 = ` + tables.InboxDone + ` THEN now() END
    FROM numbered AS n
    ORDER BY n.message_id
    ON CONFLICT (consumer, message_id) DO NOTHING
    RETURNING i.message_id
),
notified AS (
    SELECT pg_notify($10, $1)
    WHERE $10::text IS NOT NULL AND EXISTS (SELECT 1 FROM inserted)
)
-- One row that is always there, so the NOTIFY is always evaluated...
SELECT 0 AS ord, NULL::bytea AS payload_hash FROM (SELECT count(*) FROM notified) AS n
UNION ALL
-- ...then only the messages that were not inserted.
SELECT m.ord, (SELECT e.payload_hash FROM /* schema */inbox AS e
               WHERE e.consumer = $1 AND e.message_id = m.message_id)
FROM input AS m
WHERE NOT EXISTS (SELECT 1 FROM inserted AS ins WHERE ins.message_id = m.message_id)`

// receiveOneSQL stores a single message without an ordering key, and
// without a NOTIFY: a plain INSERT whose row count says whether it was new.
// The arrival number comes from the column's default: with no key there is
// no order to keep but arrival's, and nothing to lock. For a duplicate, the
// caller reads the stored hash with hashSQL.
const receiveOneSQL = `
INSERT INTO /* schema */inbox
    (consumer, message_id, event_type, payload, payload_hash, metadata, max_attempts, status, attempts, processed_at)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8,
        CASE WHEN $8 = ` + tables.InboxDone + ` THEN 1 ELSE 0 END, CASE WHEN $8 = ` + tables.InboxDone + ` THEN now() END)
ON CONFLICT (consumer, message_id) DO NOTHING`

// hashSQL reads the stored payload hashes of ids: for duplicates whose row
// committed while receiveSQL ran, and for receiveOneSQL's duplicates.
const hashSQL = `
SELECT message_id, payload_hash FROM /* schema */inbox
WHERE consumer = $1 AND message_id = ANY($2::text[])`

// logConflictsSQL records deliveries that reused a stored id with other
// bytes. It only appends, so it never waits on a row a dispatcher holds.
const logConflictsSQL = `
INSERT INTO /* schema */inbox_conflicts (consumer, message_id, payload_hash, payload)
SELECT $1, c.message_id, c.payload_hash, c.payload
FROM unnest($2::text[], $3::bytea[], $4::bytea[]) AS c(message_id, payload_hash, payload)`
