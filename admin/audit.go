package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditAction names an operator action in the audit log.
type AuditAction string

// The actions the audit log records.
const (
	// AuditReplay is Replay.
	AuditReplay AuditAction = "replay"
	// AuditDiscard is Discard.
	AuditDiscard AuditAction = "discard"
	// AuditPurge is Purge.
	AuditPurge AuditAction = "purge"
	// AuditScheduleReplay is ScheduleReplay. Its record stays running
	// while the replay waits and runs; the maintenance job adds each
	// batch's count to it and ends it.
	AuditScheduleReplay AuditAction = "schedule_replay"
	// AuditCancelScheduledReplay is CancelScheduledReplay.
	AuditCancelScheduledReplay AuditAction = "cancel_scheduled_replay"
	// AuditOutboxRetry is OutboxRetry.
	AuditOutboxRetry AuditAction = "outbox_retry"
	// AuditEditPayload is EditAndReplay: a payload replaced, and the
	// message replayed.
	AuditEditPayload AuditAction = "edit_payload"
	// AuditPause is Pause: its selection names the consumer and event
	// type, its note is the reason.
	AuditPause AuditAction = "pause"
	// AuditResume is Resume.
	AuditResume AuditAction = "resume"
	// AuditReleaseLeases is ReleaseLeases: a process's leases ended.
	AuditReleaseLeases AuditAction = "release_leases"
)

// AuditActions returns every action the audit log records.
func AuditActions() []AuditAction {
	return []AuditAction{AuditReplay, AuditDiscard, AuditPurge, AuditScheduleReplay, AuditCancelScheduledReplay,
		AuditOutboxRetry, AuditEditPayload, AuditPause, AuditResume, AuditReleaseLeases}
}

// AuditState is how far an audited action got.
type AuditState string

// The states of an audit record.
const (
	// AuditRunning is an action under way, or one whose process died
	// before it ended: its Affected is what it had changed by then.
	AuditRunning AuditState = "running"
	// AuditFinished is an action that ran to its end.
	AuditFinished AuditState = "finished"
	// AuditInterrupted is an action that stopped part way (an error, a
	// cancelled context, Ctrl-C): its Affected is what it changed before.
	AuditInterrupted AuditState = "interrupted"
	// AuditCancelled is a scheduled replay called off before it started.
	AuditCancelled AuditState = "cancelled"
)

// Actor is who made an operator action, and from where, as the audit log
// records it.
type Actor struct {
	// Host is the machine it ran on. Defaults to the host name.
	Host string `json:"host"`
	// Name is who: a person, or a program. Defaults to the program's
	// name (ProcessActor).
	Name string `json:"name"`
	// PID is the process that made it. Defaults to this process's.
	PID int `json:"pid,omitzero"`
}

// ProcessActor returns this process as an Actor: its program's name, the
// host name and its pid. It is what an action whose options leave Actor
// unset is recorded as.
func ProcessActor() Actor {
	host, _ := os.Hostname()
	return Actor{Host: host, Name: filepath.Base(os.Args[0]), PID: os.Getpid()}
}

// withDefaults fills each unset field of a from ProcessActor.
func (a Actor) withDefaults() Actor {
	p := ProcessActor()
	if a.Name == "" {
		a.Name = p.Name
	}
	if a.Host == "" {
		a.Host = p.Host
	}
	if a.PID == 0 {
		a.PID = p.PID
	}
	return a
}

// AuditRecord is one operator action, as the audit log keeps it.
type AuditRecord struct {
	// Action is what was done.
	Action AuditAction `json:"action"`
	// Actor is who did it, and from where.
	Actor Actor `json:"actor"`
	// Affected counts the rows it changed: messages replayed, discarded
	// or deleted, outbox rows retried, scheduled replays called off.
	Affected int64 `json:"affected"`
	// At is when it began (database time).
	At time.Time `json:"at"`
	// Error is why it was interrupted.
	Error string `json:"error,omitzero"`
	// FinishedAt is when it ended; nil while it runs (or if its process
	// died).
	FinishedAt *time.Time `json:"finished_at"`
	// ID identifies the record.
	ID int64 `json:"id"`
	// Note is the operator's note, or a discard's reason.
	Note string `json:"note,omitzero"`
	// Selection is which rows it was asked to act on: a Filter, ids, a
	// purge's status and age, as JSON.
	Selection json.RawMessage `json:"selection"`
	// State is how far it got.
	State AuditState `json:"state"`
}

const (
	// AuditLimitDefault is how many records AuditLog returns when given no
	// limit.
	AuditLimitDefault = 100
)

// AuditLogOptions says which audit records AuditLog returns.
type AuditLogOptions struct {
	// Action keeps one action. Defaults to "": every action.
	Action AuditAction

	// Limit is the most records returned, newest first. Defaults to
	// AuditLimitDefault (also for any negative limit).
	Limit int

	// Since keeps the records of actions begun at or after it. Defaults to
	// the zero time: every record.
	Since time.Time
}

// AuditLog returns the audit records opts selects, newest first.
func (a *Admin) AuditLog(ctx context.Context, opts AuditLogOptions) ([]AuditRecord, error) {
	if opts.Action != "" && !slices.Contains(AuditActions(), opts.Action) {
		return nil, fmt.Errorf("unknown audit action %q: use one of %s", opts.Action, strings.Join(textArray(AuditActions()), ", "))
	}
	if opts.Limit <= 0 {
		opts.Limit = AuditLimitDefault
	}
	var since any
	if !opts.Since.IsZero() {
		since = opts.Since
	}
	rows, err := a.pool.Query(ctx, a.q["auditLog"], since, nullable(string(opts.Action)), opts.Limit)
	if err != nil {
		return nil, a.dbError(ctx, "read the audit log", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditRecord, error) {
		var (
			r         AuditRecord
			selection []byte
			note, e   *string
			pid       *int
		)
		err := row.Scan(&r.ID, &r.At, &r.FinishedAt, &r.Actor.Name, &r.Actor.Host, &pid, &r.Action, &selection,
			&note, &r.Affected, &r.State, &e)
		if pid != nil {
			r.Actor.PID = *pid
		}
		if note != nil {
			r.Note = *note
		}
		if e != nil {
			r.Error = *e
		}
		r.Selection = selection
		return r, err
	})
	if err != nil {
		return nil, a.dbError(ctx, "read the audit log", err)
	}
	return out, nil
}

// auditEntry is what an action's audit record starts with.
type auditEntry struct {
	action    AuditAction
	actor     Actor
	note      string
	selection any // encoded as JSON
}

// auditStart inserts e's record, running, and returns its id. The
// action's statements then add their counts to it (auditCountSQL), each in
// the statement that makes the change, so the record and the change never
// disagree: what committed is counted, also when the process dies.
func (a *Admin) auditStart(ctx context.Context, db dbtx, e auditEntry) (int64, error) {
	selection, err := json.Marshal(e.selection)
	if err != nil {
		return 0, fmt.Errorf("audit %s: %w", e.action, err)
	}
	actor := e.actor.withDefaults()
	var id int64
	// The selection goes as text, cast to jsonb in SQL: see scheduleReplay.
	err = db.QueryRow(ctx, a.q["auditStart"], actor.Name, actor.Host, actor.PID, string(e.action), string(selection), e.note).Scan(&id)
	if err != nil {
		return 0, a.dbError(ctx, "record the action in the audit log", err)
	}
	return id, nil
}

// auditEnd records how action id ended: finished, or interrupted by
// cause.
func (a *Admin) auditEnd(ctx context.Context, db dbtx, id int64, cause error) error {
	state, text := AuditFinished, any(nil)
	if cause != nil {
		state, text = AuditInterrupted, cause.Error()
	}
	if _, err := db.Exec(ctx, a.q["auditEnd"], id, string(state), text); err != nil {
		return a.dbError(ctx, "record the end of the action in the audit log", err)
	}
	return nil
}

// audited runs the bulk action op, recorded as e: its record is inserted
// first, op's batches add their counts to it (op gets its id), and how it
// ended is recorded however it ends, with a context that outlives ctx, so
// that an interrupted action is recorded as such with the count it
// reached. In a caller's transaction an error usually aborts it, and the
// record then goes with the rolled-back change.
func (a *Admin) audited(ctx context.Context, db dbtx, e auditEntry, op func(auditID int64) (int64, error)) (int64, error) {
	id, err := a.auditStart(ctx, db, e)
	if err != nil {
		return 0, err
	}
	n, opErr := op(id)
	endErr := a.auditEnd(context.WithoutCancel(ctx), db, id, opErr)
	if opErr != nil {
		return n, opErr
	}
	return n, endErr
}

// inTx runs fn all or nothing: in a transaction of its own on the pool,
// or in a savepoint of the caller's tx when given one, so that an error
// leaves neither a change nor an audit record behind, and the caller's
// transaction usable.
func (a *Admin) inTx(ctx context.Context, tx pgx.Tx, fn func(db dbtx) error) error {
	run := func(tx pgx.Tx) error { return fn(tx) }
	if tx != nil {
		return pgx.BeginFunc(ctx, tx, run)
	}
	return pgx.BeginFunc(ctx, a.pool, run)
}
