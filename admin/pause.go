package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/internal/ident"
)

// ErrAlreadyPaused is returned by Pause when what it is asked to pause is
// paused already: the pause in place is kept as it is (its author, time
// and reason), never overwritten.
var ErrAlreadyPaused = errors.New("already paused")

// ErrNotPaused is returned by Resume when what it is asked to resume is
// not paused: nothing was changed, nor recorded.
var ErrNotPaused = errors.New("not paused")

// Pause is an operator's pause of a consumer, or of one event type of it,
// as consumer_pauses keeps it. While it is in place, every dispatcher of
// the consumer, in every process, stops claiming the messages it covers
// within a poll interval; messages keep arriving and wait as pending
// until Resume lifts it.
type Pause struct {
	// AuditID is the audit record of the pause (AuditPause).
	AuditID int64 `json:"audit_id,omitzero"`
	// Consumer is the consumer paused.
	Consumer string `json:"consumer"`
	// EventType is the one event type paused; "" for the whole consumer.
	EventType string `json:"event_type"`
	// PausedAt is when it was paused (database time).
	PausedAt time.Time `json:"paused_at"`
	// PausedBy is who paused it (Actor.Name).
	PausedBy string `json:"paused_by"`
	// Reason is why, as the operator said.
	Reason string `json:"reason"`
}

// Scope names what p pauses, for a message: `consumer "payments"`, or
// `event type "ChargeCard" of consumer "payments"`.
func (p Pause) Scope() string { return pauseScope(p.Consumer, p.EventType) }

func pauseScope(consumer, eventType string) string {
	if eventType == "" {
		return fmt.Sprintf("consumer %q", consumer)
	}
	return fmt.Sprintf("event type %q of consumer %q", eventType, consumer)
}

// PauseOptions says what Pause pauses, who pauses it and why.
type PauseOptions struct {
	// Actor is who pauses, as the audit log and the pause record it.
	// Defaults to ProcessActor, field by field.
	Actor Actor

	// Consumer is the consumer to pause. Required.
	Consumer string

	// EventType pauses only this event type of the consumer. Defaults to
	// "": the whole consumer, every event type.
	EventType string

	// Force pauses a consumer, or an event type of it, that pgbox has not
	// seen (see UnknownError): one about to be deployed, say. Defaults to
	// false: an unknown name, most likely a typo, is refused.
	Force bool

	// Reason says why, for whoever finds the consumer paused: kept with
	// the pause and as the audit record's note. Required.
	Reason string
}

// pauseSelection is a pause's or a resume's selection in the audit log.
type pauseSelection struct {
	Consumer  string `json:"consumer"`
	EventType string `json:"event_type"`
}

// UnknownError is returned by Pause, unless PauseOptions.Force is set,
// for a consumer pgbox has not seen (no message of it in the inbox, no
// dispatcher of it registered, no pause of it ever recorded in the audit
// log), or for an event type the consumer has not
// received lately: a typo far more often than an intent. Nothing was
// changed. KnownConsumer returns it too. It matches ErrNotFound
// (errors.Is).
type UnknownError struct {
	// Consumer is the consumer asked for.
	Consumer string
	// EventType is the event type asked for; "" when it is the consumer
	// that is unknown.
	EventType string
	// Known lists what is known instead: the consumers, or the consumer's
	// event types, by name.
	Known []string

	// forcible is set on Pause's errors, whose message says how to
	// force the pause.
	forcible bool
}

// knownShown is how many known names an UnknownError's message lists.
const knownShown = 20

func (e *UnknownError) Error() string {
	var b strings.Builder
	if e.EventType == "" {
		fmt.Fprintf(&b, "consumer %q is unknown: the inbox holds no message of it, no dispatcher of it is registered, and it was never paused", e.Consumer)
	} else {
		fmt.Fprintf(&b, "consumer %q has no message of event type %q among its pending messages and %d others sampled",
			e.Consumer, e.EventType, knownEventTypesSample)
	}
	noun := map[bool]string{true: "consumers", false: "event types"}[e.EventType == ""]
	switch {
	case len(e.Known) == 0:
		fmt.Fprintf(&b, " (there are no known %s)", noun)
	case len(e.Known) > knownShown:
		fmt.Fprintf(&b, " (known %s: %s, and %d more)", noun, quoteAll(e.Known[:knownShown]), len(e.Known)-knownShown)
	default:
		fmt.Fprintf(&b, " (known %s: %s)", noun, quoteAll(e.Known))
	}
	b.WriteString("; nothing was changed: check the name")
	if e.forcible {
		b.WriteString(", or force the pause (PauseOptions.Force, inboxctl pause --force) to pause it before its first message")
	}
	return b.String()
}

// Is reports that an UnknownError is a kind of ErrNotFound.
func (e *UnknownError) Is(target error) bool { return target == ErrNotFound }

// quoteAll quotes each of names and joins them with commas.
func quoteAll(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(quoted, ", ")
}

// Pause pauses opts.Consumer, or one event type of it: every dispatcher
// of the consumer, in every process, stops claiming its messages (of that
// event type) within a poll interval, and says so in its health and logs;
// messages keep arriving and wait as pending, their ordering keys held in
// order, until Resume. The pause and its audit record (AuditPause) are
// written in one transaction, the record's id kept with the pause.
//
// A pause of the whole consumer and pauses of its event types are
// separate: both may be in place, and resuming one leaves the others.
//
// It returns an error wrapping ErrAlreadyPaused, naming who paused it,
// when and why, when it is paused already, and an *UnknownError for a
// consumer or event type pgbox has not seen (unless opts.Force); then
// nothing is changed or recorded.
func (a *Admin) Pause(ctx context.Context, opts PauseOptions) (*Pause, error) {
	return a.pause(ctx, nil, opts)
}

// PauseTx is Pause inside the caller's transaction: the pause takes
// effect, and dispatchers see it, only if tx commits.
func (a *Admin) PauseTx(ctx context.Context, tx pgx.Tx, opts PauseOptions) (*Pause, error) {
	return a.pause(ctx, tx, opts)
}

func (a *Admin) pause(ctx context.Context, tx pgx.Tx, opts PauseOptions) (*Pause, error) {
	switch {
	case opts.Consumer == "":
		return nil, errors.New("pause: a consumer is required")
	case strings.TrimSpace(opts.Reason) == "":
		return nil, errors.New("pause: a reason is required, for whoever finds the consumer paused")
	}
	if !opts.Force {
		if err := a.checkKnown(ctx, opts.Consumer, opts.EventType); err != nil {
			return nil, err
		}
	}
	actor := opts.Actor.withDefaults()
	var p *Pause
	err := a.inTx(ctx, tx, func(db dbtx) error {
		auditID, err := a.auditStart(ctx, db, auditEntry{action: AuditPause, actor: actor, note: opts.Reason,
			selection: pauseSelection{Consumer: opts.Consumer, EventType: opts.EventType}})
		if err != nil {
			return err
		}
		p, err = scanPause(db.QueryRow(ctx, a.render(pauseSQL), opts.Consumer, opts.EventType, actor.Name, opts.Reason, auditID))
		if errors.Is(err, pgx.ErrNoRows) {
			return a.alreadyPaused(ctx, db, opts.Consumer, opts.EventType)
		}
		if err != nil {
			return a.dbError(ctx, "pause", err)
		}
		return a.auditEnd(ctx, db, auditID, nil)
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// alreadyPaused explains why a pause of consumer's eventType inserted
// nothing: who paused it, when and why.
func (a *Admin) alreadyPaused(ctx context.Context, db dbtx, consumer, eventType string) error {
	p, err := scanPause(db.QueryRow(ctx, a.render(pauseOfSQL), consumer, eventType))
	switch {
	case errors.Is(err, pgx.ErrNoRows): // resumed between the two statements
		return fmt.Errorf("%s was paused by someone else, then resumed, as this pause ran; nothing was changed: try again", pauseScope(consumer, eventType))
	case err != nil:
		return a.dbError(ctx, "pause", err)
	}
	return fmt.Errorf("%s is %w by %s since %s UTC (reason: %q); nothing was changed: resume it first to pause it anew",
		p.Scope(), ErrAlreadyPaused, p.PausedBy, p.PausedAt.UTC().Format(time.DateTime), p.Reason)
}

// KnownConsumer returns nil when pgbox has seen consumer (a message of it
// in the inbox, a dispatcher of it registered, or a pause of it, forced
// before its first message, in the audit log), and an *UnknownError
// listing the consumers it has seen otherwise: for a tool that found
// nothing of consumer to tell a misspelt name from a consumer with
// nothing to show.
func (a *Admin) KnownConsumer(ctx context.Context, consumer string) error {
	return a.known(ctx, "check the consumer", consumer, "")
}

// checkKnown returns Pause's *UnknownError when pgbox has not seen
// consumer (no message, no registered dispatcher, never paused), or, for
// an eventType,
// when none of the consumer's pending messages nor a sample of its others
// is of it.
func (a *Admin) checkKnown(ctx context.Context, consumer, eventType string) error {
	err := a.known(ctx, "pause", consumer, "")
	if err == nil && eventType != "" {
		err = a.known(ctx, "pause", consumer, eventType)
	}
	if unknown, ok := errors.AsType[*UnknownError](err); ok {
		unknown.forcible = true
	}
	return err
}

// known returns an *UnknownError when pgbox has not seen consumer, or,
// for an eventType, the consumer's eventType (see checkKnown); op names
// the operation in a database error. The audit log is asked last, and
// only about consumer: it is read only for a name the inbox and the
// processes do not know.
func (a *Admin) known(ctx context.Context, op, consumer, eventType string) error {
	query, arg := knownConsumersSQL, []any{}
	if eventType != "" {
		query, arg = knownEventTypesSQL, []any{consumer, knownEventTypesSample}
	}
	rows, err := a.pool.Query(ctx, a.render(query), arg...)
	if err != nil {
		return a.dbError(ctx, op, err)
	}
	known, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return a.dbError(ctx, op, err)
	}
	if slices.Contains(known, cmp.Or(eventType, consumer)) { // the event type among the known ones, or else the consumer
		return nil
	}
	if eventType == "" {
		var paused bool
		if err := a.pool.QueryRow(ctx, a.render(pausedEverSQL), consumer, string(AuditPause)).Scan(&paused); err != nil {
			return a.dbError(ctx, op, err)
		}
		if paused {
			return nil
		}
	}
	return &UnknownError{Consumer: consumer, EventType: eventType, Known: known}
}

// ResumeOptions says what Resume resumes, and who resumes it.
type ResumeOptions struct {
	// Actor is who resumes, as the audit log records it. Defaults to
	// ProcessActor, field by field.
	Actor Actor

	// Consumer is the consumer to resume. Required.
	Consumer string

	// EventType resumes the pause of this one event type. Defaults to "":
	// the pause of the whole consumer. Either way only that pause is
	// lifted: a whole-consumer resume leaves the pauses of single event
	// types in place (Pauses lists them).
	EventType string

	// Note says why, in the audit log. Defaults to none.
	Note string
}

// Resume lifts the pause of opts.Consumer (or of its opts.EventType):
// its dispatchers claim its messages again within a poll interval, in
// their order. The pause is deleted and the resume recorded in the audit
// log (AuditResume) in one transaction. It returns the pause it lifted,
// or an error wrapping ErrNotPaused when there is none; then nothing is
// changed or recorded.
func (a *Admin) Resume(ctx context.Context, opts ResumeOptions) (*Pause, error) {
	return a.resume(ctx, nil, opts)
}

// ResumeTx is Resume inside the caller's transaction: the pause is lifted
// only if tx commits.
func (a *Admin) ResumeTx(ctx context.Context, tx pgx.Tx, opts ResumeOptions) (*Pause, error) {
	return a.resume(ctx, tx, opts)
}

func (a *Admin) resume(ctx context.Context, tx pgx.Tx, opts ResumeOptions) (*Pause, error) {
	if opts.Consumer == "" {
		return nil, errors.New("resume: a consumer is required")
	}
	var p *Pause
	err := a.inTx(ctx, tx, func(db dbtx) error {
		auditID, err := a.auditStart(ctx, db, auditEntry{action: AuditResume, actor: opts.Actor, note: opts.Note,
			selection: pauseSelection{Consumer: opts.Consumer, EventType: opts.EventType}})
		if err != nil {
			return err
		}
		p, err = scanPause(db.QueryRow(ctx, a.render(resumeSQL), opts.Consumer, opts.EventType, auditID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s is %w; nothing was changed", pauseScope(opts.Consumer, opts.EventType), ErrNotPaused)
		}
		if err != nil {
			return a.dbError(ctx, "resume", err)
		}
		return a.auditEnd(ctx, db, auditID, nil)
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Pauses lists the pauses in place, by consumer and event type (a whole
// consumer's first): consumer's, or every consumer's for "".
func (a *Admin) Pauses(ctx context.Context, consumer string) ([]Pause, error) {
	rows, err := a.pool.Query(ctx, a.render(pausesSQL), nullable(consumer))
	if err != nil {
		return nil, a.dbError(ctx, "list pauses", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Pause, error) {
		p, err := scanPause(row)
		if err != nil {
			return Pause{}, err
		}
		return *p, nil
	})
	if err != nil {
		return nil, a.dbError(ctx, "list pauses", err)
	}
	return out, nil
}

// scanPause reads a row of pauseColumns.
func scanPause(row pgx.Row) (*Pause, error) {
	var (
		p       Pause
		auditID *int64
	)
	if err := row.Scan(&p.Consumer, &p.EventType, &p.PausedAt, &p.PausedBy, &p.Reason, &auditID); err != nil {
		return nil, err
	}
	p.AuditID = deref(auditID)
	return &p, nil
}

// render is sql for this Admin's schema.
func (a *Admin) render(sql string) string { return ident.Render(sql, a.cfg.Schema) }
