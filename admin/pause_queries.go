package admin

// The SQL of pauses (pause.go). As elsewhere in the package, "/* schema */"
// is replaced by the quoted schema name.

import "github.com/pgbox/pgbox/internal/tables"

// pauseColumns are the columns of a Pause, in scanPause's order.
const pauseColumns = `p.consumer, p.event_type, p.paused_at, p.paused_by, p.reason, p.audit_id`

// pauseSQL pauses event type $2 (”: every one) of consumer $1, by $3,
// for reason $4, audited as record $5, and returns the pause; no row when
// it is paused already (the pause in place is left as it is). A pause
// being inserted by another transaction is waited for.
var pauseSQL = `
WITH changed AS (
    INSERT INTO /* schema */consumer_pauses AS p (consumer, event_type, paused_by, reason, audit_id)
    VALUES ($1, $2, $3, $4, $5::bigint)
    ON CONFLICT (consumer, event_type) DO NOTHING
    RETURNING ` + pauseColumns + `
),
` + auditCountSQL("$5") + `
SELECT * FROM changed AS p`

// pauseOfSQL reads the pause of event type $2 (”: the whole consumer)
// of consumer $1.
const pauseOfSQL = `
SELECT ` + pauseColumns + ` FROM /* schema */consumer_pauses AS p WHERE p.consumer = $1 AND p.event_type = $2`

// resumeSQL lifts the pause of event type $2 (”: the whole consumer) of
// consumer $1, counted in audit record $3, and returns it; no row when
// there is none.
var resumeSQL = `
WITH changed AS (
    DELETE FROM /* schema */consumer_pauses AS p WHERE p.consumer = $1 AND p.event_type = $2
    RETURNING ` + pauseColumns + `
),
` + auditCountSQL("$3") + `
SELECT * FROM changed AS p`

// pausesSQL lists the pauses of consumer $1 (NULL: every consumer), a
// whole consumer's (”) before its event types'.
const pausesSQL = `
SELECT ` + pauseColumns + ` FROM /* schema */consumer_pauses AS p
WHERE ($1::text IS NULL OR p.consumer = $1)
ORDER BY p.consumer, p.event_type`

// knownConsumersSQL lists the consumers pgbox knows: those with messages
// in the inbox (one index probe each: distinctConsumersSQL) and those of
// the dispatchers registered, live or dead.
const knownConsumersSQL = `
WITH RECURSIVE ` + distinctConsumersSQL + `
SELECT c.consumer FROM consumers AS c WHERE c.consumer IS NOT NULL
UNION
SELECT p.consumer FROM /* schema */processes AS p WHERE p.consumer IS NOT NULL
ORDER BY 1`

// pausedEverSQL says whether the audit log records a pause ($2, AuditPause)
// of consumer $1: a consumer paused with Force before its first message
// is known by it once resumed. The audit log holds operators' actions,
// not messages, and has no index to find a pause by; known asks it only
// for a name nothing else knows, and stops at the first pause it finds.
const pausedEverSQL = `
SELECT EXISTS (SELECT 1 FROM /* schema */audit_log AS a WHERE a.action = $2 AND a.selection->>'consumer' = $1)`

// knownEventTypesSample is how many of a consumer's messages
// knownEventTypesSQL reads besides its pending ones.
const knownEventTypesSample = 10000

// knownEventTypesSQL lists the event types consumer $1 is known to
// receive: those of its pending messages (what a pause would hold up,
// read from inbox_pending_idx) and of up to $2 of its other messages
// (from the primary key, in no useful order). Both reads are bounded, so
// the check costs the same at 600M retained rows: an event type seen only
// in an old or rare message may be missed, and PauseOptions.Force then
// pauses it anyway.
var knownEventTypesSQL = `
SELECT DISTINCT t.event_type FROM (
    (SELECT i.event_type FROM /* schema */inbox AS i WHERE i.consumer = $1 AND i.status = ` + tables.InboxPending + ` LIMIT $2)
    UNION ALL
    (SELECT i.event_type FROM /* schema */inbox AS i WHERE i.consumer = $1 LIMIT $2)
) AS t
ORDER BY 1`
