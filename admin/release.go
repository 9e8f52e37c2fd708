package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

// ErrProcessAlive is returned (wrapped) by ReleaseLeases for a process
// seen within pgbox.ProcessDeadAfter heartbeats, unless
// ReleaseLeasesOptions.Force is set.
var ErrProcessAlive = errors.New("process is alive")

// ReleaseLeasesOptions says whose leases ReleaseLeases releases, and how.
type ReleaseLeasesOptions struct {
	// Actor is who releases, as the audit log records it. Defaults to
	// ProcessActor, field by field.
	Actor Actor

	// Force releases the leases of a process that is alive (seen within
	// pgbox.ProcessDeadAfter heartbeats) too. Its messages are then
	// handled again elsewhere while its own handlers may still be running
	// them: their side effects outside the database happen twice (the
	// fencing keeps their database writes to one). Defaults to false: an
	// alive process is refused with ErrProcessAlive.
	Force bool

	// ProcessID is the process whose leases are released: Process.ID, as
	// Processes (inboxctl processes) lists it. Required.
	ProcessID int64
}

// processLockSQL locks process $1's row for a release, so that it cannot
// come back alive (its heartbeat waits) between the check and the
// release, and says whether it is dead. $2 is pgbox.ProcessDeadAfter.
var processLockSQL = `
SELECT p.kind, coalesce(p.consumer, ''), p.name, p.host, p.pid, ` + processDeadSQL("$2") + `
FROM /* schema */processes AS p
WHERE p.id = $1
FOR UPDATE`

// processDeadSQL is true for a process p not seen for more than param
// (pgbox.ProcessDeadAfter) of its heartbeats.
func processDeadSQL(param string) string {
	return `p.last_seen_at < now() - ` + param + `::int * p.heartbeat_ms * interval '1 millisecond'`
}

// releaseLeasesSQL ends, now, the leases that process $1 holds: its
// dispatcher's running inbox messages of its consumer, or its relay's
// running outbox rows, whose claim token carries its id (see processesSQL)
// and whose lease has not ended. Only their lease end (available_at)
// changes: the claim token stays, so the next claim takes them over
// through its expired-lease path exactly as if the lease had run out (the
// lost attempt is recorded and counts, a last one makes the message dead),
// and a late result of the old holder, fenced by that token, matches no
// row once they are taken over. It counts them in audit record $2 and
// returns how many it released.
var releaseLeasesSQL = `
WITH inbox_released AS (
    UPDATE /* schema */inbox AS i SET available_at = now()
    FROM /* schema */processes AS p
    WHERE p.id = $1 AND p.kind = ` + dispatcherKindSQL + ` AND i.consumer = p.consumer
      AND i.status = ` + tables.InboxRunning + ` AND i.available_at > now() AND i.claim_token >> 32 = p.id
    RETURNING 1
),
outbox_released AS (
    UPDATE /* schema */outbox AS o SET available_at = now()
    FROM /* schema */processes AS p
    WHERE p.id = $1 AND p.kind = ` + relayKindSQL + `
      AND o.status = ` + tables.OutboxRunning + ` AND o.available_at > now() AND o.claim_token >> 32 = p.id
    RETURNING 1
),
changed AS (
    SELECT 1 FROM inbox_released
    UNION ALL
    SELECT 1 FROM outbox_released
),
` + auditCountSQL("$2") + `
SELECT count(*) FROM changed`

// releaseSelection is a lease release's selection in the audit log: the
// process, as it was when released.
type releaseSelection struct {
	Alive     bool              `json:"alive"`
	Consumer  string            `json:"consumer,omitzero"`
	Force     bool              `json:"force,omitzero"`
	Host      string            `json:"host"`
	Kind      pgbox.ProcessKind `json:"kind"`
	Name      string            `json:"name"`
	PID       int               `json:"pid"`
	ProcessID int64             `json:"process_id"`
}

// ReleaseLeases ends the leases that a process's claims still hold, now
// instead of when they run out: a dispatcher's leased inbox messages, a
// relay's outbox rows. It is for a process known to be gone (killed, its
// host lost), whose messages would otherwise wait out their leases.
//
// Releasing changes nothing but the leases' end: a live dispatcher of the
// consumer (or a live relay) takes the messages over at its next claim,
// just as when a lease runs out, so the lost attempt is recorded and
// counts, and a message on its last attempt ends dead. If the process was
// not gone after all, the claim tokens fence it: once a message is taken
// over, its done mark or failure matches no row and (for an
// in-transaction write) rolls back; only what its handler did outside the
// database happens twice, as after any lease expiry.
//
// An alive process is refused, with an error wrapping ErrProcessAlive,
// unless opts.Force; an unknown one with an error wrapping ErrNotFound.
// The release is audited (AuditReleaseLeases) and returns how many
// messages it released: 0 for a process that holds none (a maintainer
// never does).
func (a *Admin) ReleaseLeases(ctx context.Context, opts ReleaseLeasesOptions) (int64, error) {
	return a.releaseLeases(ctx, nil, opts)
}

// ReleaseLeasesTx is ReleaseLeases inside the caller's transaction: the
// leases end if tx commits, and the process's row stays locked (its
// heartbeats wait) until then.
func (a *Admin) ReleaseLeasesTx(ctx context.Context, tx pgx.Tx, opts ReleaseLeasesOptions) (int64, error) {
	return a.releaseLeases(ctx, tx, opts)
}

func (a *Admin) releaseLeases(ctx context.Context, tx pgx.Tx, opts ReleaseLeasesOptions) (int64, error) {
	if opts.ProcessID <= 0 {
		return 0, fmt.Errorf("admin: ReleaseLeasesOptions.ProcessID is %d: use a process's id, as Processes (inboxctl processes) lists it", opts.ProcessID)
	}
	var released int64
	err := a.inTx(ctx, tx, func(db dbtx) error {
		s := releaseSelection{Force: opts.Force, ProcessID: opts.ProcessID}
		var dead bool
		err := db.QueryRow(ctx, ident.Render(processLockSQL, a.cfg.Schema), opts.ProcessID, pgbox.ProcessDeadAfter).
			Scan(&s.Kind, &s.Consumer, &s.Name, &s.Host, &s.PID, &dead)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("process %d: %w: inboxctl processes lists the registered processes (one that stopped cleanly deleted its row, and holds no leases); nothing was released",
				opts.ProcessID, ErrNotFound)
		}
		if err != nil {
			return a.dbError(ctx, "release leases: read the process", err)
		}
		s.Alive = !dead
		if s.Alive && !opts.Force {
			return fmt.Errorf("%s %s (id %d, host %s, pid %d): %w: it was seen within its last %d heartbeats and may be working on its messages; release only a process known to be gone, or force it; nothing was released",
				s.Kind, s.Name, opts.ProcessID, s.Host, s.PID, ErrProcessAlive, pgbox.ProcessDeadAfter)
		}
		e := auditEntry{action: AuditReleaseLeases, actor: opts.Actor, selection: s}
		released, err = a.audited(ctx, db, e, func(auditID int64) (int64, error) {
			var n int64
			if err := db.QueryRow(ctx, ident.Render(releaseLeasesSQL, a.cfg.Schema), opts.ProcessID, auditID).Scan(&n); err != nil {
				return 0, a.dbError(ctx, "release leases", err)
			}
			return n, nil
		})
		return err
	})
	if err != nil {
		return 0, err
	}
	return released, nil
}
