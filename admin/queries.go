package admin

// The admin package's SQL. "/* schema */" is replaced by the quoted schema
// name when an Admin is created (ident.Render).
//
// Statuses are never spelt out here: they come from package tables, as SQL
// literals concatenated into the text, so a misspelt status does not compile
// and the literals still match the partial indexes' predicates. A status the
// caller chooses (a list's statuses, a purge's status) stays a parameter.

import "github.com/pgbox/pgbox/internal/tables"

// errorPatternSQL is row i's last error as failure groups read it: with
// what varies from one occurrence of the same failure to the next (ids,
// quoted values, timestamps, hex, numbers) replaced by placeholders, so
// that "order 'order-17' timed out after 30s" and "order 'order-9' timed
// out after 31s" read alike. The function is migration 8's; it runs in the
// database, so grouping a million dead messages never ships them to the
// client.
const errorPatternSQL = `/* schema */inbox_error_pattern(i.last_error)`

// fingerprintSQL identifies row i's failure group: its consumer, event type
// and error pattern, hashed to 12 hex digits an operator can type
// (migration 8's inbox_failure_group). It is inbox_failure_group_idx's
// expression, written the same way so the planner can use that index.
const fingerprintSQL = `/* schema */inbox_failure_group(i.consumer, i.event_type, ` + errorPatternSQL + `)`

// replayableSQL is the rows replay may touch: dead, discarded, or pending
// after a failure (backing off). Never running (a worker holds it) nor done
// (replaying it would run its handler again, behind the dedupe's back). It
// is inbox_failed_idx's predicate, written the same way so the planner can
// use that index.
const replayableSQL = `(i.status IN (` + tables.InboxDead + `, ` + tables.InboxDiscarded + `) OR (i.status = ` +
	tables.InboxPending + ` AND i.last_error IS NOT NULL))`

// inGroupSQL is true for row i in the failure group $8. A group holds only
// rows that failed and were not handled since (dead, discarded, or pending
// after a failure): replayableSQL, spelt out as a literal together with
// the last error's presence, so that the planner, which sees them once $8
// is bound, reads the group through inbox_failure_group_idx or
// inbox_failed_idx instead of every done row.
const inGroupSQL = `(` + replayableSQL + ` AND i.last_error IS NOT NULL AND ` + fingerprintSQL + ` = $8)`

// filterSQL is the WHERE clause shared by list, count, replay and discard.
// Each condition applies only when its parameter is not NULL (or true):
// $1 consumer, $2 statuses, $3 event type, $4 received since, $5 received
// before, $6 error contains (case-insensitive, literal), $7 error matches
// (case-insensitive regular expression), $8 failure fingerprint, $9 ids,
// $10 replayable only, $11 ordering key.
const filterSQL = `
    ($1::text IS NULL OR i.consumer = $1)
    AND ($2::text[] IS NULL OR i.status = ANY($2::text[]))
    AND ($3::text IS NULL OR i.event_type = $3)
    AND ($4::timestamptz IS NULL OR i.received_at >= $4)
    AND ($5::timestamptz IS NULL OR i.received_at < $5)
    AND ($6::text IS NULL OR strpos(lower(coalesce(i.last_error, '')), lower($6)) > 0)
    AND ($7::text IS NULL OR coalesce(i.last_error, '') ~* $7)
    AND ($8::text IS NULL OR ` + inGroupSQL + `)
    AND ($9::text[] IS NULL OR i.message_id = ANY($9::text[]))
    AND ($10::boolean IS NOT TRUE OR ` + replayableSQL + `)
    AND ($11::text IS NULL OR i.ordering_key = $11)`

// messageColumns are the columns of a Message, in scan order.
const messageColumns = `i.consumer, i.message_id, i.seq, i.event_type, i.status, coalesce(i.ordering_key, ''),
    i.attempts, i.max_attempts, i.replays, i.received_at, i.available_at, i.processed_at, i.last_error`

// listSQL lists messages matching the filter, newest first, after the
// keyset $12 (a seq; messages below it) and up to $13 of them.
const listSQL = `
SELECT ` + messageColumns + `
FROM /* schema */inbox AS i
WHERE ` + filterSQL + `
  AND ($12::bigint IS NULL OR i.seq < $12)
ORDER BY i.seq DESC
LIMIT $13`

// showSQL reads one message with its payload, metadata and history, and,
// for a pending message blocked behind a dead message of its ordering key
// (tables.InboxBehindDead), the first such dead message: its id, attempts,
// and when it died (its last history entry; its last due time for one
// without history), found through inbox_ordering_idx.
const showSQL = `
SELECT ` + messageColumns + `, i.payload, i.metadata, i.errors,
       (SELECT count(*) FROM /* schema */inbox_conflicts AS c WHERE c.consumer = i.consumer AND c.message_id = i.message_id),
       h.message_id, h.attempts, h.dead_since
FROM /* schema */inbox AS i
LEFT JOIN LATERAL (
    SELECT d.message_id, d.attempts, coalesce((d.errors->-1->>'at')::timestamptz, d.available_at) AS dead_since
    FROM /* schema */inbox AS d
    WHERE i.status = ` + tables.InboxPending + ` AND i.ordering_key IS NOT NULL
      AND d.consumer = i.consumer AND d.ordering_key = i.ordering_key AND d.status = ` + tables.InboxDead + ` AND d.seq < i.seq
    ORDER BY d.seq
    LIMIT 1
) AS h ON true
WHERE i.consumer = $1 AND i.message_id = $2`

// distinctConsumersSQL is a recursive CTE, consumers(consumer), of every
// consumer with messages (and one NULL row at the end), found by skipping
// through the primary key's consumers one index probe at a time: a few
// reads per consumer, however many messages each holds.
const distinctConsumersSQL = `
consumers AS (
    (SELECT i.consumer FROM /* schema */inbox AS i ORDER BY i.consumer LIMIT 1)
    UNION ALL
    SELECT (SELECT i.consumer FROM /* schema */inbox AS i WHERE i.consumer > c.consumer ORDER BY i.consumer LIMIT 1)
    FROM consumers AS c
    WHERE c.consumer IS NOT NULL
)`

// consumersOfSQL finds which consumers hold a message id, for a show
// without --consumer: one primary-key lookup per consumer, since the key
// leads with the consumer and no index starts with the message id.
const consumersOfSQL = `
WITH RECURSIVE ` + distinctConsumersSQL + `
SELECT c.consumer FROM consumers AS c
WHERE c.consumer IS NOT NULL
  AND EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE i.consumer = c.consumer AND i.message_id = $1)
ORDER BY c.consumer
LIMIT 10`

// groupKnownSQL reports whether any message the inbox holds, in any
// status, has a last error in failure group $1: a group that was replayed
// and then succeeded is known (and drained), a mistyped fingerprint is
// not. It reads inbox_failure_group_idx, whose rows are only those that
// ever failed.
const groupKnownSQL = `
SELECT EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE i.last_error IS NOT NULL AND ` + fingerprintSQL + ` = $1)`

// countSQL counts the messages matching the filter.
const countSQL = `
SELECT count(*) FROM /* schema */inbox AS i WHERE ` + filterSQL

// auditCountSQL is a WITH item that adds the rows of the WITH item
// "changed" to audit record param (NULL: no record), in the statement that
// changes them: the record's count and the change commit together or not
// at all, so a crash can never leave them disagreeing.
func auditCountSQL(param string) string {
	return `audited AS (
    UPDATE /* schema */audit_log SET affected = affected + (SELECT count(*) FROM changed)
    WHERE id = ` + param + `::bigint AND EXISTS (SELECT 1 FROM changed)
)`
}

// replaySetSQL is what a replay sets on inbox row i: pending now, attempts
// zeroed, the replay counted, and an entry with the note param added to
// its history (which is kept). extra is more history entries to add
// before the replay's; "" for none.
func replaySetSQL(note, extra string) string {
	if extra != "" {
		extra += ", "
	}
	return `status       = ` + tables.InboxPending + `,
    attempts     = 0,
    available_at = now(),
    claim_token  = NULL,
    replays      = i.replays + 1,
    errors       = i.errors || jsonb_build_array(` + extra + `jsonb_strip_nulls(jsonb_build_object(
                       'action', 'replayed', 'at', now(), 'replay', i.replays + 1,
                       'previous_status', i.status, 'previous_attempts', i.attempts, 'note', ` + note + `::text)))`
}

// replayBatchSQL replays up to $13 replayable messages matching the filter
// whose seq is above $12, in seq order, in one short statement (see
// replaySetSQL; $14 is the operator's note), and counts them in audit
// record $15. Batches walk forward by seq, so every matching row is
// visited once however many there are, and no statement holds many locks
// for long.
var replayBatchSQL = `
WITH batch AS (
    SELECT i.consumer, i.message_id
    FROM /* schema */inbox AS i
    WHERE ` + filterSQL + ` AND ` + replayableSQL + ` AND i.seq > $12
    ORDER BY i.seq
    LIMIT $13
    FOR UPDATE
),
changed AS (
    UPDATE /* schema */inbox AS i SET ` + replaySetSQL("$14", "") + `
    FROM batch AS b
    WHERE i.consumer = b.consumer AND i.message_id = b.message_id
    RETURNING i.seq
),
` + auditCountSQL("$15") + `
SELECT seq FROM changed`

// discardBatchSQL sets aside up to $13 dead messages matching the filter
// whose seq is above $12: discarded, with the reason $14 in the history,
// counted in audit record $15. A discarded message no longer holds up its
// ordering key.
var discardBatchSQL = `
WITH batch AS (
    SELECT i.consumer, i.message_id
    FROM /* schema */inbox AS i
    WHERE ` + filterSQL + ` AND i.status = ` + tables.InboxDead + ` AND i.seq > $12
    ORDER BY i.seq
    LIMIT $13
    FOR UPDATE
),
changed AS (
    UPDATE /* schema */inbox AS i SET
        status = ` + tables.InboxDiscarded + `,
        errors = i.errors || jsonb_build_array(jsonb_build_object('action', 'discarded', 'at', now(), 'reason', $14::text))
    FROM batch AS b
    WHERE i.consumer = b.consumer AND i.message_id = b.message_id
    RETURNING i.seq
),
` + auditCountSQL("$15") + `
SELECT seq FROM changed`

// idStatusSQL reports the status of each of the ids $2 held by consumer
// $1, for telling an operator which ids were not found or not eligible.
const idStatusSQL = `
SELECT message_id, status FROM /* schema */inbox WHERE consumer = $1 AND message_id = ANY($2::text[])`

// purgeBatchSQL deletes up to $3 messages in status $2 (done or
// discarded) processed (or received, for discarded ones) more than $1
// milliseconds ago, for consumer $4 (NULL: every consumer), counts them in
// audit record $5, and returns how many it deleted.
var purgeBatchSQL = `
WITH changed AS (
    DELETE FROM /* schema */inbox
    WHERE (consumer, message_id) IN (
        SELECT i.consumer, i.message_id FROM /* schema */inbox AS i
        WHERE i.status = $2
          AND coalesce(i.processed_at, i.received_at) < now() - $1 * interval '1 millisecond'
          AND ($4::text IS NULL OR i.consumer = $4)
        LIMIT $3
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
),
` + auditCountSQL("$5") + `
SELECT count(*) FROM changed`

// purgeableSQL is true for an inbox row i that a purge deletes: in status
// $2 (done or discarded), processed (or received, for a discarded one)
// more than $1 milliseconds ago, of consumer $3 (NULL: any).
const purgeableSQL = `i.status = $2
  AND coalesce(i.processed_at, i.received_at) < now() - $1 * interval '1 millisecond'
  AND ($3::text IS NULL OR i.consumer = $3)`

// countPurgeableSQL counts what a purge would delete.
const countPurgeableSQL = `
SELECT count(*) FROM /* schema */inbox AS i WHERE ` + purgeableSQL

// failuresSQL groups dead and failing (pending after a failure) messages
// by failure group, largest groups first, up to $2 of them, for consumer
// $1 (NULL: every consumer). A group's first and last failure are the
// earliest and latest failed attempt in its messages' histories (entries
// without an action; replays and discards are actions). With a window of
// $3 milliseconds (NULL: none) it keeps only the groups with a failed
// attempt in the window (every group if $6), counts those attempts, and
// with $4 buckets (0: none) counts them per bucket of the window, oldest
// first. Every time is the database's.
//
// The rows come from inbox_failed_idx (InboxFailing is its predicate's
// dead and failing part), newest first, $5 of them at most (NULL: all):
// only they are grouped and their histories read, since the error
// pattern's regular expressions cost tens of microseconds a row (seconds
// at a million). One row more is read to tell whether there were more
// (the last column, partial). The fingerprint is inbox_failure_group of
// the pattern already computed (what fingerprintSQL computes from the
// row).
const failuresSQL = `
WITH newest AS MATERIALIZED (
    SELECT i.seq, i.consumer, i.event_type, i.status, i.received_at, i.message_id, i.last_error, i.errors
    FROM /* schema */inbox AS i
    WHERE ` + tables.InboxFailing + `
      AND ($1::text IS NULL OR i.consumer = $1)
    ORDER BY i.seq DESC
    LIMIT $5::bigint + 1
),
failing AS MATERIALIZED (
    SELECT p.*, /* schema */inbox_failure_group(p.consumer, p.event_type, p.pattern) AS fingerprint
    FROM (
        SELECT i.consumer, i.event_type, ` + errorPatternSQL + ` AS pattern,
               i.status, i.received_at, i.message_id, i.last_error, i.errors
        FROM (SELECT * FROM newest ORDER BY seq DESC LIMIT $5::bigint) AS i
        OFFSET 0 -- kept apart, so the pattern's regular expressions run once a row
    ) AS p
),
span AS (
    SELECT now() - $3::bigint * interval '1 millisecond' AS since, now() AS until
),
attempts AS (
    SELECT f.fingerprint, (e.entry->>'at')::timestamptz AS at
    FROM failing AS f, jsonb_array_elements(f.errors) AS e(entry)
    WHERE e.entry->>'action' IS NULL
),
times AS (
    SELECT a.fingerprint, min(a.at) AS first_at, max(a.at) AS last_at,
           count(*) FILTER (WHERE a.at >= s.since) AS recent
    FROM attempts AS a, span AS s
    GROUP BY a.fingerprint
),
buckets AS (
    SELECT a.fingerprint,
           least(width_bucket(extract(epoch FROM a.at), extract(epoch FROM s.since), extract(epoch FROM s.until), $4::int), $4::int) AS bucket,
           count(*) AS n
    FROM attempts AS a, span AS s
    WHERE $4::int > 0 AND a.at >= s.since
    GROUP BY 1, 2
)
SELECT f.consumer, f.event_type, f.fingerprint, min(f.pattern),
       count(*), count(*) FILTER (WHERE f.status = ` + tables.InboxDead + `),
       min(f.received_at), max(f.received_at), min(f.message_id), min(f.last_error),
       t.first_at, t.last_at, coalesce(t.recent, 0),
       CASE WHEN $4::int > 0 THEN ARRAY(
           SELECT coalesce(b.n, 0)
           FROM generate_series(1, $4::int) AS g(k)
           LEFT JOIN buckets AS b ON b.fingerprint = f.fingerprint AND b.bucket = g.k
           ORDER BY g.k) END,
       (SELECT s.since FROM span AS s),
       coalesce((SELECT count(*) FROM newest) > $5::bigint, false)
FROM failing AS f
LEFT JOIN times AS t ON t.fingerprint = f.fingerprint
GROUP BY f.consumer, f.event_type, f.fingerprint, t.first_at, t.last_at, t.recent
HAVING $3::bigint IS NULL OR $6::boolean OR coalesce(t.recent, 0) > 0
ORDER BY count(*) DESC, 1, 2, 3
LIMIT $2`

// statsSQL counts each consumer's messages that are not done, by status,
// splitting pending ones into fresh (never failed, due), retrying (pending
// after a failure; due at the earliest next-retry time) and scheduled
// (never failed, due later: snoozed by their handler), with the age of the
// oldest pending message and how many messages were done in the last
// minute and hour. Each status is read from its partial index
// (inbox_pending_idx, inbox_running_idx, inbox_failed_idx), so the count
// costs what those few rows cost, never a read of the dedupe memory.
//
// Pending messages held behind a dead message of their ordering key
// (tables.InboxBehindDead) are counted as blocked, and taken out of the
// fresh, retrying and scheduled counts. They are found from the dead end:
// the first dead message of each key (the dead rows, from
// inbox_failed_idx), then the pending messages of that key after it
// (inbox_ordering_idx), so the count costs what the dead keys and their
// blocked messages cost, not a probe per pending message. Done
// messages are counted apart: doneExactSQL, or estimated from
// doneEstimateSQL.
//
// The recent done messages are read from inbox_done_idx from its newest
// end, recentDoneCap of them at most: at 1,000 messages a second the last
// hour holds 3.6 million, seconds of reading. Up to the cap the minute's
// and hour's counts are exact; past it, a count whose window reaches
// beyond the oldest row read is the rate over the rows read times the
// window (the last two columns say which), so stats costs the same
// whatever the traffic.
const statsSQL = `
WITH RECURSIVE ` + distinctConsumersSQL + `,
open AS (
    SELECT i.consumer, i.status, i.last_error IS NOT NULL AS failed, i.available_at, i.received_at
    FROM /* schema */inbox AS i WHERE i.status = ` + tables.InboxPending + `
    UNION ALL
    SELECT i.consumer, i.status, false, i.available_at, i.received_at
    FROM /* schema */inbox AS i WHERE i.status = ` + tables.InboxRunning + `
    UNION ALL
    SELECT i.consumer, i.status, true, i.available_at, i.received_at
    FROM /* schema */inbox AS i WHERE i.status IN (` + tables.InboxDead + `, ` + tables.InboxDiscarded + `)
),
counts AS (
    SELECT o.consumer,
           count(*) FILTER (WHERE o.status = ` + tables.InboxPending + ` AND NOT o.failed AND o.available_at <= now()) AS fresh,
           count(*) FILTER (WHERE o.status = ` + tables.InboxPending + ` AND o.failed) AS retrying,
           count(*) FILTER (WHERE o.status = ` + tables.InboxPending + ` AND NOT o.failed AND o.available_at > now()) AS scheduled,
           count(*) FILTER (WHERE o.status = ` + tables.InboxRunning + `) AS running,
           count(*) FILTER (WHERE o.status = ` + tables.InboxDead + `) AS dead,
           count(*) FILTER (WHERE o.status = ` + tables.InboxDiscarded + `) AS discarded,
           extract(epoch FROM now() - min(o.received_at) FILTER (WHERE o.status = ` + tables.InboxPending + `)) AS oldest,
           min(o.available_at) FILTER (WHERE o.status = ` + tables.InboxPending + ` AND o.failed) AS next_retry
    FROM open AS o
    GROUP BY o.consumer
),
dead_heads AS (
    SELECT i.consumer, i.ordering_key, min(i.seq) AS seq
    FROM /* schema */inbox AS i
    WHERE i.status = ` + tables.InboxDead + ` AND i.ordering_key IS NOT NULL
    GROUP BY i.consumer, i.ordering_key
),
blocked AS (
    SELECT h.consumer,
           count(*) AS blocked,
           count(*) FILTER (WHERE NOT b.failed AND b.available_at <= now()) AS fresh,
           count(*) FILTER (WHERE b.failed) AS retrying,
           count(*) FILTER (WHERE NOT b.failed AND b.available_at > now()) AS scheduled
    FROM dead_heads AS h
    CROSS JOIN LATERAL (
        SELECT i.last_error IS NOT NULL AS failed, i.available_at
        FROM /* schema */inbox AS i
        WHERE i.consumer = h.consumer AND i.ordering_key = h.ordering_key
          AND i.status = ` + tables.InboxPending + ` AND i.seq > h.seq
    ) AS b
    GROUP BY h.consumer
),
newest AS (
    SELECT i.consumer, i.processed_at
    FROM /* schema */inbox AS i
    WHERE i.status = ` + tables.InboxDone + ` AND i.processed_at > now() - interval '1 hour'
    ORDER BY i.processed_at DESC
    LIMIT ` + recentDoneCap + ` + 1 -- one more, to tell a full cap from a cut one
),
span AS (
    -- read: the seconds the rows read cover, when the cap cut the hour short.
    SELECT CASE WHEN count(*) > ` + recentDoneCap + `
                THEN greatest(extract(epoch FROM now() - min(n.processed_at)), 0.001) END AS read
    FROM newest AS n
),
recent AS (
    SELECT n.consumer,
           count(*) FILTER (WHERE n.processed_at > now() - interval '1 minute') AS minute,
           count(*) AS hour
    FROM newest AS n
    GROUP BY n.consumer
)
SELECT c.consumer, coalesce(n.fresh, 0) - coalesce(b.fresh, 0), coalesce(n.retrying, 0) - coalesce(b.retrying, 0),
       coalesce(n.scheduled, 0) - coalesce(b.scheduled, 0), coalesce(b.blocked, 0), coalesce(n.running, 0),
       coalesce(n.dead, 0), coalesce(n.discarded, 0), n.oldest, n.next_retry,
       CASE WHEN s.read < 60 THEN round(coalesce(r.minute, 0) * 60 / s.read)::bigint ELSE coalesce(r.minute, 0) END,
       CASE WHEN s.read IS NOT NULL THEN round(coalesce(r.hour, 0) * 3600 / s.read)::bigint ELSE coalesce(r.hour, 0) END,
       coalesce(s.read < 60, false), s.read IS NOT NULL
FROM consumers AS c
CROSS JOIN span AS s
LEFT JOIN counts AS n ON n.consumer = c.consumer
LEFT JOIN blocked AS b ON b.consumer = c.consumer
LEFT JOIN recent AS r ON r.consumer = c.consumer
WHERE c.consumer IS NOT NULL
ORDER BY c.consumer`

// recentDoneCap is how many of the newest done messages statsSQL reads at
// most: about 10 ms of reading.
const recentDoneCap = "20000"

// doneExactSQL counts each consumer's done messages: every one of them,
// which on a large inbox takes a while (stats --exact).
const doneExactSQL = `
SELECT i.consumer, count(*) FROM /* schema */inbox AS i WHERE i.status = ` + tables.InboxDone + ` GROUP BY i.consumer`

// estimateSQL reads what the planner knows of each partition of table $2
// (inbox or outbox) of schema $1 (a quoted name), without reading it: its
// row count at the last VACUUM or ANALYZE (reltuples, -1 if never) and
// pages then (relpages) and now, and the consumer column's statistics
// (most common values and their frequencies, distinct count, NULL
// fraction; NULL for the outbox, an empty partition, or one never
// analyzed). A partitioned table keeps no rows of its own: the
// partitions' own statistics (not inherited) are the ones autovacuum keeps
// up to date.
const estimateSQL = `
SELECT c.reltuples::float8, c.relpages::bigint, pg_relation_size(c.oid) / current_setting('block_size')::bigint,
       s.most_common_vals::text::text[], s.most_common_freqs::float8[], s.n_distinct::float8, s.null_frac::float8
FROM pg_catalog.pg_inherits AS i
JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_stats AS s
       ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = 'consumer' AND NOT s.inherited
WHERE i.inhparent = ($1 || '.' || $2)::regclass`

// outboxStatsSQL counts the outbox's unfinished rows by status, each from
// its partial index, with the age of the oldest unpublished row (a status
// at a time too: no partial index holds a list of statuses), and the
// pending rows blocked behind a dead row of their ordering key, found from
// the first dead row of each key (outbox_dead_idx) through
// outbox_ordering_idx, as statsSQL finds the inbox's; the
// published rows are counted by publishedExactSQL or estimated
// (estimateSQL).
const outboxStatsSQL = `
SELECT (SELECT count(*) FROM /* schema */outbox WHERE status = ` + tables.OutboxPending + `),
       (SELECT count(*) FROM /* schema */outbox WHERE status = ` + tables.OutboxRunning + `),
       (SELECT count(*) FROM /* schema */outbox WHERE status = ` + tables.OutboxDead + `),
       extract(epoch FROM now() - least((SELECT min(created_at) FROM /* schema */outbox WHERE status = ` + tables.OutboxPending + `),
                                        (SELECT min(created_at) FROM /* schema */outbox WHERE status = ` + tables.OutboxRunning + `))),
       (SELECT count(*)
        FROM (SELECT o.ordering_key, min(o.seq) AS seq FROM /* schema */outbox AS o
              WHERE o.status = ` + tables.OutboxDead + ` AND o.ordering_key IS NOT NULL
              GROUP BY o.ordering_key) AS h
        CROSS JOIN LATERAL (SELECT 1 FROM /* schema */outbox AS o
                            WHERE o.ordering_key = h.ordering_key AND o.status = ` + tables.OutboxPending + ` AND o.seq > h.seq) AS b),
       now()`

// publishedExactSQL counts the published rows the outbox keeps: every one
// of them (stats --exact).
const publishedExactSQL = `SELECT count(*) FROM /* schema */outbox WHERE status = ` + tables.OutboxPublished

// outboxColumns are the columns of an OutboxMessage, in scan order.
const outboxColumns = `o.id, o.seq, o.topic, o.event_type, coalesce(o.ordering_key, ''), o.status, o.attempts, o.replays,
    o.created_at, o.available_at, o.published_at, o.last_error`

// outboxListSQL lists outbox rows: $1 statuses, $2 topic, $3 keyset
// (seq below), $4 limit, $5 ordering key; newest first.
const outboxListSQL = `
SELECT ` + outboxColumns + `
FROM /* schema */outbox AS o
WHERE ($1::text[] IS NULL OR o.status = ANY($1::text[]))
  AND ($2::text IS NULL OR o.topic = $2)
  AND ($5::text IS NULL OR o.ordering_key = $5)
  AND ($3::bigint IS NULL OR o.seq < $3)
ORDER BY o.seq DESC
LIMIT $4`

// outboxShowSQL reads one outbox row with its payload, metadata and
// history, and for a pending row blocked behind a dead row of its ordering
// key the first such dead row, as showSQL does for the inbox.
const outboxShowSQL = `
SELECT ` + outboxColumns + `, o.payload, o.metadata, o.errors, h.id::text, h.attempts, h.dead_since
FROM /* schema */outbox AS o
LEFT JOIN LATERAL (
    SELECT d.id, d.attempts, coalesce((d.errors->-1->>'at')::timestamptz, d.available_at) AS dead_since
    FROM /* schema */outbox AS d
    WHERE o.status = ` + tables.OutboxPending + ` AND o.ordering_key IS NOT NULL
      AND d.ordering_key = o.ordering_key AND d.status = ` + tables.OutboxDead + ` AND d.seq < o.seq
    ORDER BY d.seq
    LIMIT 1
) AS h ON true
WHERE o.id = $1`

// outboxRetryableSQL is true for an outbox row o that an outbox retry
// retries: dead, and among ids $1 (NULL: any).
const outboxRetryableSQL = `o.status = ` + tables.OutboxDead + ` AND ($1::uuid[] IS NULL OR o.id = ANY($1::uuid[]))`

// outboxRetrySQL puts dead outbox rows back to pending: the ids $1, or
// every dead row when $1 is NULL, up to $2 per statement, counted in audit
// record $3; it returns how many it put back.
var outboxRetrySQL = `
WITH batch AS (
    SELECT o.id FROM /* schema */outbox AS o
    WHERE ` + outboxRetryableSQL + `
    ORDER BY o.seq
    LIMIT $2
    FOR UPDATE
),
changed AS (
    UPDATE /* schema */outbox AS o SET
        status       = ` + tables.OutboxPending + `,
        attempts     = 0,
        available_at = now(),
        claim_token  = NULL,
        replays      = o.replays + 1,
        errors       = o.errors || jsonb_build_array(jsonb_build_object('action', 'retried', 'at', now(), 'previous_attempts', o.attempts))
    FROM batch AS b
    WHERE o.id = b.id
    RETURNING o.id
),
` + auditCountSQL("$3") + `
SELECT count(*) FROM changed`

// The states of an audit record as SQL literals.
const (
	auditRunningSQL     = "'" + string(AuditRunning) + "'"
	auditFinishedSQL    = "'" + string(AuditFinished) + "'"
	auditCancelledSQL   = "'" + string(AuditCancelled) + "'"
	auditInterruptedSQL = "'" + string(AuditInterrupted) + "'"
)

// auditStartSQL records an action as it begins: $1 actor, $2 host, $3
// pid, $4 action, $5 selection (JSON), $6 note.
const auditStartSQL = `
INSERT INTO /* schema */audit_log (actor, host, pid, action, selection, note, state)
VALUES ($1, $2, nullif($3::integer, 0), $4, $5::jsonb, nullif($6, ''), ` + auditRunningSQL + `)
RETURNING id`

// auditEndSQL records how action $1 ended: state $2, error $3.
const auditEndSQL = `
UPDATE /* schema */audit_log SET state = $2, error = $3::text, finished_at = now() WHERE id = $1`

// auditLogSQL lists audit records begun at or after $1 (NULL: all), of
// action $2 (NULL: all), newest first, up to $3.
const auditLogSQL = `
SELECT id, at, finished_at, actor, host, pid, action, selection, note, affected, state, error
FROM /* schema */audit_log
WHERE ($1::timestamptz IS NULL OR at >= $1)
  AND ($2::text IS NULL OR action = $2)
ORDER BY at DESC, id DESC
LIMIT $3`

// editLockSQL locks message $2 of consumer $1 for an edit, and says
// whether it is replayable and what its payload's SHA-256 is.
const editLockSQL = `
SELECT i.status, ` + replayableSQL + `, sha256(i.payload)
FROM /* schema */inbox AS i
WHERE i.consumer = $1 AND i.message_id = $2
FOR UPDATE`

// editSQL keeps the payload of message $2 of consumer $1 in
// inbox_payload_edits, replaces it with $4, and replays the message, with
// the edit and the replay in its history (note $5) and counted in audit
// record $3. payload_hash is left as it is: the hash of what the producer
// sent, which a redelivery is compared with.
var editSQL = `
WITH kept AS (
    INSERT INTO /* schema */inbox_payload_edits (consumer, message_id, audit_id, payload)
    SELECT consumer, message_id, $3, payload FROM /* schema */inbox WHERE consumer = $1 AND message_id = $2
),
changed AS (
    UPDATE /* schema */inbox AS i SET
        payload = $4::bytea,
        ` + replaySetSQL("$5", `jsonb_strip_nulls(jsonb_build_object(
                       'action', 'edited', 'at', now(), 'audit_id', $3::bigint,
                       'previous_size', octet_length(i.payload), 'size', octet_length($4::bytea), 'note', $5::text))`) + `
    WHERE i.consumer = $1 AND i.message_id = $2
    RETURNING 1
),
` + auditCountSQL("$3") + `
SELECT count(*) FROM changed`

// The states of a scheduled replay as SQL literals, and the set of those
// not finished (waiting or under way).
const (
	replayScheduledSQL = "'" + string(ReplayScheduled) + "'"
	replayRunningSQL   = "'" + string(ReplayRunning) + "'"
	replayDoneSQL      = "'" + string(ReplayDone) + "'"
	replayFailedSQL    = "'" + string(ReplayFailed) + "'"
	replayCancelledSQL = "'" + string(ReplayCancelled) + "'"
	replayUnfinished   = "(" + replayScheduledSQL + ", " + replayRunningSQL + ")"
)

// scheduledReplayColumns are the columns of a ScheduledReplay, in scan
// order.
const scheduledReplayColumns = `r.id, r.run_at, r.filter, coalesce(r.note, ''), r.state, r.replayed,
    r.created_at, r.started_at, r.finished_at, r.last_error, r.rate, r.selected, r.audit_id`

// scheduleReplaySQL records a replay to run at $1 (NULL: now, by the
// database clock) of the messages matching the filter $2 (JSON), with the
// operator's note $3, at most $4 messages per second (NULL: no limit), $5
// of them replayable now, audited as record $6.
const scheduleReplaySQL = `
INSERT INTO /* schema */scheduled_replays AS r (run_at, filter, note, rate, selected, audit_id)
VALUES (coalesce($1::timestamptz, now()), $2::jsonb, nullif($3, ''), $4::double precision, $5::bigint, $6::bigint)
RETURNING ` + scheduledReplayColumns

// scheduledReplaysSQL lists scheduled replays: those not finished first, by
// due time, then the finished ones, newest first; up to $1 of them.
const scheduledReplaysSQL = `
SELECT ` + scheduledReplayColumns + `
FROM /* schema */scheduled_replays AS r
ORDER BY r.state IN ` + replayUnfinished + ` DESC,
         CASE WHEN r.state IN ` + replayUnfinished + ` THEN r.run_at END,
         r.id DESC
LIMIT $1`

// countScheduledSQL counts the replays waiting for their time or under way.
const countScheduledSQL = `
SELECT count(*) FROM /* schema */scheduled_replays WHERE state IN ` + replayUnfinished

// cancelReplaySQL cancels scheduled replay $1 if it is waiting or under
// way (a throttled one, say; the batches it committed stay replayed), ends the record of its scheduling as cancelled, counts it in the cancel's
// audit record $2, and returns its state either way (no row: no such
// replay).
var cancelReplaySQL = `
WITH target AS (
    SELECT id, state, audit_id FROM /* schema */scheduled_replays WHERE id = $1 FOR UPDATE
),
changed AS (
    UPDATE /* schema */scheduled_replays AS r SET state = ` + replayCancelledSQL + `, finished_at = now()
    FROM target AS t
    WHERE r.id = t.id AND t.state IN ` + replayUnfinished + `
    RETURNING r.id, t.audit_id
),
closed AS (
    UPDATE /* schema */audit_log AS l SET state = ` + auditCancelledSQL + `, finished_at = now()
    FROM changed AS c
    WHERE l.id = c.audit_id
),
` + auditCountSQL("$2") + `
SELECT t.state, EXISTS (SELECT 1 FROM changed) FROM target AS t`

// pacedFromSQL is the time from which throttled scheduled replay r has
// its rate to spend: where its batches have paced it to, but no earlier
// than one tick ($1 milliseconds: how often the runner runs) or one
// message's time back, whichever is longer. A replay whose runner stopped
// for an hour so resumes at its rate, instead of catching up the hour at
// once.
const pacedFromSQL = `greatest(coalesce(r.paced_at, r.run_at),
    now() - greatest($1 * interval '1 millisecond', interval '1 second' / r.rate))`

// allowanceSQL is how many messages throttled scheduled replay r may
// replay now; NULL for a replay without a rate.
const allowanceSQL = `floor(extract(epoch FROM now() - ` + pacedFromSQL + `) * r.rate)::bigint`

// claimDueReplaySQL locks the scheduled replay that is due first (by the
// database clock) and may replay something now (a throttled one: when its
// rate allows, with $1 the runner's tick), skipping one that another
// maintenance worker holds, for the length of one batch's transaction. It
// returns how many messages the replay may replay (NULL: as many as a
// batch holds).
const claimDueReplaySQL = `
SELECT r.id, r.filter, coalesce(r.note, ''), r.cursor_seq, r.audit_id, ` + allowanceSQL + `
FROM /* schema */scheduled_replays AS r
WHERE r.state IN ` + replayUnfinished + ` AND r.run_at <= now()
  AND (r.rate IS NULL OR ` + allowanceSQL + ` >= 1)
ORDER BY r.run_at, r.id
LIMIT 1
FOR UPDATE SKIP LOCKED`

// advanceReplaySQL records one batch of scheduled replay $2, in the batch's
// transaction: $3 messages replayed, up to seq $4, paced on by their time
// at its rate ($1 is the runner's tick, as in claimDueReplaySQL); a batch
// shorter than allowed ($5 is true) ends it, and the record of its
// scheduling.
const advanceReplaySQL = `
WITH advanced AS (
    UPDATE /* schema */scheduled_replays AS r SET
        state       = CASE WHEN $5 THEN ` + replayDoneSQL + ` ELSE ` + replayRunningSQL + ` END,
        replayed    = r.replayed + $3::bigint,
        cursor_seq  = greatest(r.cursor_seq, $4),
        paced_at    = CASE WHEN r.rate IS NOT NULL THEN ` + pacedFromSQL + ` + $3::bigint * (interval '1 second' / r.rate) END,
        started_at  = coalesce(r.started_at, now()),
        finished_at = CASE WHEN $5 THEN now() END
    WHERE r.id = $2
    RETURNING r.audit_id
)
UPDATE /* schema */audit_log AS l SET state = ` + auditFinishedSQL + `, finished_at = now()
FROM advanced AS a
WHERE $5 AND l.id = a.audit_id`

// failReplaySQL ends scheduled replay $1 with the error $2: its filter can
// never run (an invalid regular expression, say). The record of its
// scheduling ends as interrupted, with the error.
const failReplaySQL = `
WITH failed AS (
    UPDATE /* schema */scheduled_replays SET
        state = ` + replayFailedSQL + `, last_error = $2, started_at = coalesce(started_at, now()), finished_at = now()
    WHERE id = $1
    RETURNING audit_id
)
UPDATE /* schema */audit_log AS l SET state = ` + auditInterruptedSQL + `, error = $2, finished_at = now()
FROM failed AS f
WHERE l.id = f.audit_id`
