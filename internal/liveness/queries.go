package liveness

// The processes table's SQL. "/* schema */" is replaced by the quoted
// schema name when a Process is created (ident.Render). Every statement is
// one round trip that needs nothing of the session (PgBouncer's transaction
// pooling), and every parameter encodes as text (pgx's untyped query modes).

// registerSQL records a process that starts, and returns the id the
// database gave it and its start time by the database clock.
const registerSQL = `
INSERT INTO /* schema */processes (kind, consumer, name, host, pid, version, river_id, heartbeat_ms)
VALUES ($1, $2, $3, $4, $5::int, $6, $7, $8::bigint)
RETURNING id, started_at`

// heartbeatSQL touches the row of process $1: the one write per heartbeat.
// It writes the whole row back if it is gone (pruned after a long pause,
// or deleted by hand), under the same id and start time, so a process that
// comes back shows again as it was.
const heartbeatSQL = `
INSERT INTO /* schema */processes (id, kind, consumer, name, host, pid, version, river_id, heartbeat_ms, started_at)
VALUES ($1::bigint, $2, $3, $4, $5, $6::int, $7, $8, $9::bigint, $10::timestamptz)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now()`

// deregisterSQL deletes the row of process $1 when it stops cleanly.
const deregisterSQL = `DELETE FROM /* schema */processes WHERE id = $1::bigint`
