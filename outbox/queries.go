package outbox

// writeSQL stores a batch of outbox messages in the caller's transaction,
// in one round trip.
//
//   - key_locks: writers of the same ordering key take turns, through a
//     transaction-scoped advisory lock per key, held until the business
//     transaction ends and taken in a fixed order (so two writers cannot
//     deadlock on them).
//   - numbered: each message's seq is drawn in the order given, once every
//     key lock is held. Per key, seq order is therefore commit order, which
//     is the order the relay publishes a key's messages in.
//   - inserted: rows go in in id order, so two writers that collide on an id
//     wait for each other in one order.
//   - notified: one NOTIFY for the statement when the caller passed a
//     channel (the Outbox folds its notifications, see
//     Config.NotifyInterval), delivered at commit, waking an idle relay.
//
// Each row's bucket ($9) is its partition (migration 9): the day its
// UUIDv7 id was made, 0 for an id of the producer's that is no UUIDv7.
const writeSQL = `
WITH input AS (
    SELECT *
    FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $9::int[])
        WITH ORDINALITY AS m(id, topic, event_type, ordering_key, payload, metadata, bucket, ord)
),
key_locks AS (
    SELECT count(*) AS n
    FROM (
        SELECT pg_advisory_xact_lock(k)
        FROM (SELECT DISTINCT hashtextextended('outbox/' || ordering_key, 0) AS k
              FROM input WHERE ordering_key IS NOT NULL ORDER BY 1) AS keys
    ) AS locked
),
numbered AS (
    SELECT m.*, nextval($7::text::regclass) AS seq
    FROM input AS m CROSS JOIN key_locks
    ORDER BY m.ord
),
inserted AS (
    INSERT INTO /* schema */outbox (id, seq, topic, event_type, ordering_key, payload, metadata, bucket)
    SELECT n.id, n.seq, n.topic, n.event_type, n.ordering_key, n.payload, n.metadata::jsonb, n.bucket
    FROM numbered AS n
    ORDER BY n.id
    RETURNING 1
),
notified AS (
    SELECT pg_notify($8, '') WHERE $8::text IS NOT NULL AND EXISTS (SELECT 1 FROM inserted)
)
-- notified is read only so that it runs: a CTE that is not a data-modifying
-- statement is evaluated only where it is referenced.
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM notified)`

// writeOneSQL stores a single message without an ordering key, and without
// a NOTIFY: a plain INSERT. Its seq comes from the column's default: with
// no key there is no order to keep but arrival's, and nothing to lock.
const writeOneSQL = `
INSERT INTO /* schema */outbox (id, topic, event_type, payload, metadata, bucket)
VALUES ($1, $2, $3, $4, $5::jsonb, $6)`
