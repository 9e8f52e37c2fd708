package inbox

import "github.com/pgbox/pgbox/internal/tables"

// The inbox's SQL. "/* schema */" is replaced by the quoted schema name when
// an Inbox is created (ident.Render).

// The inbox is partitioned by bucket (migration 9, internal/partition), a
// function of the message id that every delivery of the id computes alike,
// so that a redelivery meets its first delivery in one partition's primary
// key. The Inbox computes each id's day in Go (day: the day a UUIDv7 id
// was made, or the UTC day of the IDTime that dates any other id, 0 for
// one without); the statement reads the inbox's row of the partitioning
// table (placedSQL), and with it:
//
//   - a message whose day is the origin day or later is dated: bucket = its
//     day, the day's partition (or the default one), where ON CONFLICT is
//     the whole dedupe;
//   - any other (day 0 included) is undated: bucket = -generation, the current generation,
//     and it is inserted only if no earlier generation holds its id
//     (undatedNewSQL). That read is exact because reading the partitioning
//     table locks it (ACCESS SHARE, until the transaction ends) before the
//     statement takes its snapshot, and a new generation starts only under
//     an exclusive lock on it (partition.StartGeneration): a receive sees
//     either the old generation and every earlier receive's rows, or the
//     new one after every receive into the old one has committed. So two
//     deliveries of one id can never be stored in two generations.
//
// That argument needs a fresh snapshot per statement: READ COMMITTED. In a
// transaction with a snapshot of its own (REPEATABLE READ, SERIALIZABLE)
// an undated message is refused with readCommittedError's text.
//
// A dated foreign id (dated by Message.IDTime, by_time true) is dated as
// a UUIDv7 is, and a batch holding one is stored by the statements built
// with datedNewSQL instead (the "Dated" queries), which also look for the
// id where a delivery that broke the IDTime promise by a little, or came
// before its producer sent an IDTime, would have put it.

// placedSQL, the messages of a FROM item of columns day and message_id (m),
// then placedEnd, make a FROM item: the inbox's row of the partitioning
// table (l: origin_day, generation), and the messages, as m, each with its
// bucket (bucketSQL). Its WHERE condition is placedWhere.
const (
	placedSQL = `/* schema */partitioning AS l
    CROSS JOIN LATERAL (SELECT m.*, ` + bucketSQL + ` AS bucket FROM `
	placedEnd = `) AS m`
)

// placedWhere keeps placedSQL's row of the inbox.
const placedWhere = `l.table_name = 'inbox'`

// readCommittedError is the text of the error an undated message received
// in a REPEATABLE READ or SERIALIZABLE transaction fails with.
const readCommittedError = "pgbox: an inbox receive of a message id that is no UUIDv7 must run in a READ COMMITTED transaction"

// bucketSQL is the bucket of message m (with columns day) under the inbox's
// row l of the partitioning table.
const bucketSQL = `CASE WHEN m.day >= l.origin_day THEN m.day ELSE -l.generation END`

// undatedNewSQL is true for message m (with columns day, message_id and
// bucket) unless it is undated and an earlier generation of consumer $1
// holds its id. Earlier generations have the higher buckets, up to 0; the
// range lets PostgreSQL read only their partitions. In generation 0 there
// is no earlier one, and nothing is read: an inbox stays there for its
// first retention period, or for ever without one. An undated message
// must be received in READ COMMITTED (readCommittedSQL).
const undatedNewSQL = `(m.day >= l.origin_day OR (` + readCommittedSQL + `
        AND (l.generation = 0 OR NOT EXISTS (SELECT 1 FROM /* schema */inbox AS e
                                             WHERE e.consumer = $1 AND e.message_id = m.message_id AND e.bucket > m.bucket AND e.bucket <= 0))))`

// datedNewSQL is undatedNewSQL for a batch with dated foreign ids (column
// by_time true): such a message is new unless the id is held in any
// generation (a delivery received before its producer sent an IDTime:
// each is undated, and so is any id received before version 11) or in the
// day partitions of the day before and after its own (a delivery whose
// IDTime was off by less than a day). Its own day's partition is read too,
// harmlessly: ON CONFLICT would skip the id there anyway. The reads find
// committed rows only: two deliveries with different IDTimes in flight at
// once can both be stored (docs/design.md, "Dated foreign ids"); with the
// same IDTime, ON CONFLICT keeps one. Other messages are judged as by
// undatedNewSQL. The CASE runs each probe only for the messages it is for.
const datedNewSQL = `CASE WHEN m.day < l.origin_day THEN ` + undatedNewSQL + `
        WHEN m.by_time THEN NOT EXISTS (SELECT 1 FROM /* schema */inbox AS e
                                        WHERE e.consumer = $1 AND e.message_id = m.message_id
                                          AND (e.bucket <= 0 OR e.bucket BETWEEN m.day - 1 AND m.day + 1))
        ELSE true END`

// readCommittedSQL is true in a READ COMMITTED transaction, and makes the
// statement fail with readCommittedError in any other: a cast of its text
// to boolean, which costs the common case nothing, unlike a function that
// raises (the setting in the text keeps the planner from folding the
// cast, and failing, at once).
const readCommittedSQL = `CASE WHEN current_setting('transaction_isolation') = 'read committed' THEN true
             ELSE ('` + readCommittedError + ` (this one is ' || current_setting('transaction_isolation') || ')')::boolean END`

// receiveSQL stores a batch of messages in one round trip and reports, per
// message, whether it was inserted and, if not, the payload hash already
// stored under its id. It is judgedCTE, then the CTEs below ($12 is the
// inbox's arrival sequence), then notifiedCTE and reportSQL:
//
//   - key_locks: receivers of the same ordering key take turns, through a
//     transaction-scoped advisory lock per key taken in a fixed order (so
//     two batches cannot deadlock on them).
//   - numbered: each message's arrival number (seq) is drawn in the batch's
//     order, and only once every key lock is held (numbered reads the
//     one-row aggregate of key_locks). So per key, seq order is commit order,
//     and the dispatcher, which runs a key's messages in seq order, can never
//     see a later message commit before an earlier one.
//   - inserted: ON CONFLICT DO NOTHING is the dedupe, with undatedNewSQL
//     for undated messages. When a concurrent transaction is inserting the
//     same id, PostgreSQL waits for it to end and then skips (if it
//     committed) or inserts (if it rolled back). Rows go in in message id
//     order (insertOrderSQL), so two batches that share ids wait for each
//     other in the same order and cannot deadlock. It names no conflict
//     target: the primary key (consumer, message_id, bucket) is the only
//     unique index of every partition
//     (TestTheInboxPrimaryKeyIsItsOnlyUniqueIndex), so it skips exactly the
//     duplicates; named, PostgreSQL maps it to the partition's own index at
//     every statement, which cost a single-row receive about a sixth of its
//     throughput.
var receiveSQL = receiveStatement(judgedCTE, reportSQL)

// receiveDatedSQL is receiveSQL for a batch with a dated foreign id: the
// message's foreign flags are $13.
var receiveDatedSQL = receiveStatement(judgedDatedCTE("$13"), reportDatedSQL)

// receiveStatement is receiveSQL with judged as its judged CTE and report
// as its final SELECT.
func receiveStatement(judged, report string) string {
	return `
WITH ` + judged + `,
key_locks AS (
    SELECT count(*) AS n
    FROM (
        SELECT pg_advisory_xact_lock(k)
        FROM (SELECT DISTINCT hashtextextended($1 || '/' || ordering_key, 0) AS k
              FROM judged WHERE ordering_key IS NOT NULL ORDER BY 1) AS keys
    ) AS locked
),
sequence AS (
    SELECT $12::text::regclass AS oid -- resolved once, not per row
),
numbered AS (
    SELECT m.*, nextval(s.oid) AS seq
    FROM judged AS m CROSS JOIN key_locks CROSS JOIN sequence AS s
    WHERE m.new
    ORDER BY m.ord
),
inserted AS (
    INSERT INTO /* schema */inbox AS i (seq, ` + insertColumns + `)
    SELECT n.seq, ` + insertValues + `
    FROM numbered AS n
    ` + insertOrderSQL + `
    ON CONFLICT DO NOTHING -- the primary key's, see above
    RETURNING i.message_id
),
` + notifiedCTE + report
}

// receiveKeylessSQL is receiveSQL for a batch in which no message has an
// ordering key, the common case: with no key there is no order to keep,
// so it takes no locks and leaves each message's arrival number to the
// column's default, drawn as the rows go in (in id order). That saves the
// batch a step and a copy of every row: about a sixth of the statement's
// cost for 100 new messages.
var receiveKeylessSQL = receiveKeylessStatement(judgedCTE, reportSQL)

// receiveKeylessDatedSQL is receiveKeylessSQL for a batch with a dated
// foreign id: the message's foreign flags are $12.
var receiveKeylessDatedSQL = receiveKeylessStatement(judgedDatedCTE("$12"), reportDatedSQL)

// receiveKeylessStatement is receiveKeylessSQL with judged as its judged
// CTE and report as its final SELECT.
func receiveKeylessStatement(judged, report string) string {
	return `
WITH ` + judged + `,
inserted AS (
    INSERT INTO /* schema */inbox AS i (` + insertColumns + `)
    SELECT ` + insertValues + `
    FROM judged AS n
    WHERE n.new
    ` + insertOrderSQL + `
    ON CONFLICT DO NOTHING -- the primary key's, see receiveSQL
    RETURNING i.message_id
),
` + notifiedCTE + report
}

// judgedCTE is the batch's messages, from the arrays $2 to $8 and $11, each
// with its position (ord, from 1), its bucket, and whether it is new to
// the earlier generations (new, see undatedNewSQL).
const judgedCTE = `judged AS (
    SELECT m.*, ` + undatedNewSQL + ` AS new
    FROM ` + placedSQL + `unnest($2::text[], $3::text[], $4::bytea[], $5::bytea[], $6::text[], $7::text[], $8::int[], $11::int[])
        WITH ORDINALITY AS m(message_id, event_type, payload, payload_hash, metadata, ordering_key, max_attempts, day, ord)` + placedEnd + `
    WHERE ` + placedWhere + `
)`

// judgedDatedCTE is judgedCTE for a batch with a dated foreign id, whose
// flags (true for a dated foreign id) are the array parameter foreign.
func judgedDatedCTE(foreign string) string {
	return `judged AS (
    SELECT m.*, ` + datedNewSQL + ` AS new
    FROM ` + placedSQL + `unnest($2::text[], $3::text[], $4::bytea[], $5::bytea[], $6::text[], $7::text[], $8::int[], $11::int[], ` + foreign + `::bool[])
        WITH ORDINALITY AS m(message_id, event_type, payload, payload_hash, metadata, ordering_key, max_attempts, day, by_time, ord)` + placedEnd + `
    WHERE ` + placedWhere + `
)`
}

// insertColumns and insertValues are the columns the receives insert, and
// their values for a message n of judged with status $9.
const (
	insertColumns = `consumer, message_id, event_type, payload, payload_hash, metadata, ordering_key, max_attempts,
         status, attempts, processed_at, bucket`
	insertValues = `$1, n.message_id, n.event_type, n.payload, n.payload_hash, n.metadata::jsonb, n.ordering_key, n.max_attempts,
           $9, CASE WHEN $9 = ` + tables.InboxDone + ` THEN 1 ELSE 0 END, CASE WHEN $9 = ` + tables.InboxDone + ` THEN now() END, n.bucket`
)

// insertOrderSQL is the order in which every batch receive inserts its
// rows: by id, byte by byte, whatever the database's collation, which is
// as cheap as ordering can be and the same for both statements.
const insertOrderSQL = `ORDER BY n.message_id COLLATE "C"`

// notifiedCTE sends one NOTIFY for the statement, only if something new is
// pending and the caller passed a channel $10 (the Inbox folds its
// notifications, see Config.NotifyInterval); it is delivered when the
// surrounding transaction commits, never for a rolled-back one.
const notifiedCTE = `notified AS (
    SELECT pg_notify($10, $1)
    WHERE $10::text IS NOT NULL AND EXISTS (SELECT 1 FROM inserted)
)`

// reportSQL, the final SELECT of the batch receives, returns nothing for
// an inserted message (most of them), and for each other one its position
// in the batch and the stored row's payload hash, so the caller can tell a
// redelivery from a conflicting reuse of an id. The hash comes from a
// correlated subquery on purpose: one primary-key probe per duplicate, in
// the partitions its bucket allows (its own for a dated message, the
// generations for an undated one). A row committed by a concurrent
// transaction during this statement is not visible to its snapshot; its
// hash comes back NULL and the caller looks it up with hashSQL. A first
// row, position 0, is always there, so that the notified CTE is always
// run; it says how many messages were placed, every one unless the
// partitioning table has lost the inbox's row, when none is (and nothing
// is stored).
var reportSQL = reportStatement(`e.bucket BETWEEN m.bucket AND CASE WHEN m.bucket > 0 THEN m.bucket ELSE 0 END`)

// reportDatedSQL is reportSQL for a batch with a dated foreign id, which
// may be held where datedNewSQL looks for it.
var reportDatedSQL = reportStatement(`(e.bucket BETWEEN m.bucket AND CASE WHEN m.bucket > 0 THEN m.bucket ELSE 0 END
                      OR m.by_time AND m.bucket > 0 AND (e.bucket <= 0 OR e.bucket BETWEEN m.bucket - 1 AND m.bucket + 1))`)

// reportStatement is reportSQL reading the stored hash of message m in
// the buckets where, the condition on e.bucket.
func reportStatement(where string) string {
	return `
-- One row that is always there, so the NOTIFY is always evaluated, with
-- how many messages were placed...
SELECT 0 AS ord, NULL::bytea AS payload_hash, (SELECT count(*) FROM judged) AS placed
FROM (SELECT count(*) FROM notified) AS n
UNION ALL
-- ...then only the messages that were not inserted.
SELECT m.ord, (SELECT e.payload_hash FROM /* schema */inbox AS e
               WHERE e.consumer = $1 AND e.message_id = m.message_id
                 AND ` + where + `),
       NULL
FROM judged AS m
WHERE NOT EXISTS (SELECT 1 FROM inserted AS ins WHERE ins.message_id = m.message_id)`
}

// receiveOneSQL stores a single message without an ordering key, and
// without a NOTIFY: an INSERT whose row count says whether it was new. The
// arrival number comes from the column's default: with no key there is no
// order to keep but arrival's, and nothing to lock. For a duplicate, the
// caller reads the stored hash with hashSQL.
const receiveOneSQL = `
INSERT INTO /* schema */inbox (` + oneColumns + `)
SELECT ` + oneValues + `, m.bucket
FROM ` + placedSQL + `(SELECT $2::text AS message_id, $9::int AS day) AS m` + placedEnd + `
WHERE ` + placedWhere + ` AND ` + undatedNewSQL + `
ON CONFLICT DO NOTHING -- the primary key's, see receiveSQL`

// receiveOneDatedSQL is receiveOneSQL for a dated foreign id (datedNewSQL).
const receiveOneDatedSQL = `
INSERT INTO /* schema */inbox (` + oneColumns + `)
SELECT ` + oneValues + `, m.bucket
FROM ` + placedSQL + `(SELECT $2::text AS message_id, $9::int AS day, true AS by_time) AS m` + placedEnd + `
WHERE ` + placedWhere + ` AND ` + datedNewSQL + `
ON CONFLICT DO NOTHING -- the primary key's, see receiveSQL`

// receiveOneFirstSQL is receiveOneSQL without the probe of the earlier
// generations: it stores a dated message, or an undated one while the
// inbox is in generation 0 (bucket 0, where there is nothing to probe),
// and nothing otherwise (bucket NULL). Without the probe, its
// plan neither locks nor opens the partitions and indexes the probe might
// read, at every execution; that, and reading the partitioning row as a
// plain subquery, made a single-row receive from 16 connections about a
// tenth faster. The Inbox uses it until a receive finds the inbox past
// generation 0, and from then on for dated messages only
// (Inbox.storeOne).
const receiveOneFirstSQL = `
INSERT INTO /* schema */inbox (` + oneColumns + `)
SELECT ` + oneValues + `, l.bucket
FROM (SELECT CASE WHEN $9::int >= l.origin_day THEN $9::int
                  WHEN ` + readCommittedSQL + ` AND l.generation = 0 THEN 0 END AS bucket
      FROM /* schema */partitioning AS l
      WHERE ` + placedWhere + `) AS l
WHERE l.bucket IS NOT NULL
ON CONFLICT DO NOTHING -- the primary key's, see receiveSQL`

// oneColumns and oneValues are the columns the single-message receives
// insert, and their values from the statement's parameters, but for the
// bucket, which comes last.
const (
	oneColumns = `consumer, message_id, event_type, payload, payload_hash, metadata, max_attempts, status, attempts, processed_at, bucket`
	oneValues  = `$1, $2, $3, $4, $5, $6::jsonb, $7, $8,
       CASE WHEN $8 = ` + tables.InboxDone + ` THEN 1 ELSE 0 END, CASE WHEN $8 = ` + tables.InboxDone + ` THEN now() END`
)

// layoutSQL reads the inbox's row of the partitioning table: its current
// generation and origin day. Without it no receive can place, and so
// store, a message.
const layoutSQL = `SELECT l.generation, l.origin_day FROM /* schema */partitioning AS l WHERE ` + placedWhere

// hashSQL reads the stored payload hashes of ids: for duplicates whose row
// committed while receiveSQL ran, and for receiveOneSQL's duplicates.
// Every partition may be read: it runs for duplicates only.
const hashSQL = `
SELECT message_id, payload_hash FROM /* schema */inbox
WHERE consumer = $1 AND message_id = ANY($2::text[])`

// logConflictsSQL records deliveries that reused a stored id with other
// bytes. It only appends, so it never waits on a row a dispatcher holds.
const logConflictsSQL = `
INSERT INTO /* schema */inbox_conflicts (consumer, message_id, payload_hash, payload)
SELECT $1, c.message_id, c.payload_hash, c.payload
FROM unnest($2::text[], $3::bytea[], $4::bytea[]) AS c(message_id, payload_hash, payload)`
