package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
)

// ErrNotReplayable is returned when a message asked for by id is in a
// state that replay does not touch: pending without a failure (it will
// run anyway), running (a worker holds it) or done (its effect has
// happened).
var ErrNotReplayable = errors.New("not replayable")

// EditOptions says which message EditAndReplay edits, and how.
type EditOptions struct {
	// Actor is who edits, as the audit log records it. Defaults to
	// ProcessActor, field by field.
	Actor Actor

	// Consumer is the consumer holding the message. Required.
	Consumer string

	// ID is the message's id. Required.
	ID string

	// Note says why, in the message's history and the audit log. Defaults
	// to none.
	Note string

	// Payload is the new payload, in full. Required: an empty payload is
	// refused, as a mistake far more often than an intent.
	Payload []byte
}

// validate reports options EditAndReplay refuses.
func (o EditOptions) validate() error {
	switch {
	case o.Consumer == "":
		return errors.New("edit: a consumer is required: message ids are unique per consumer")
	case o.ID == "":
		return errors.New("edit: a message id is required")
	case len(o.Payload) == 0:
		return errors.New("edit: the new payload is empty: give the whole payload the handler should see")
	}
	return nil
}

// EditAndReplay replaces the payload of one dead, discarded or failing
// message with opts.Payload and replays it, in one transaction: the
// payload it replaces is kept (inbox_payload_edits), the edit and the
// replay are added to its history, and the edit to the audit log, whose
// selection names the message and the SHA-256 of the payload it replaced
// and of the new one (previous_payload_sha256, payload_sha256, in hex).
//
// The message's payload hash stays the hash of what the producer sent:
// the inbox compares a redelivery with it, so a redelivery of the original
// is still recognised as a duplicate (not a conflict), and the edited
// payload is never overwritten by it.
//
// It returns an error wrapping ErrNotFound when the message does not
// exist, and one wrapping ErrNotReplayable when it is not dead, discarded
// or failing; then nothing is changed.
func (a *Admin) EditAndReplay(ctx context.Context, opts EditOptions) error {
	return a.editAndReplay(ctx, nil, opts)
}

// EditAndReplayTx is EditAndReplay inside the caller's transaction: the
// edit and the replay take effect if tx commits.
func (a *Admin) EditAndReplayTx(ctx context.Context, tx pgx.Tx, opts EditOptions) error {
	return a.editAndReplay(ctx, tx, opts)
}

func (a *Admin) editAndReplay(ctx context.Context, tx pgx.Tx, opts EditOptions) error {
	if err := opts.validate(); err != nil {
		return err
	}
	return a.inTx(ctx, tx, func(db dbtx) error {
		var (
			status     pgbox.InboxStatus
			replayable bool
			previous   []byte
		)
		err := db.QueryRow(ctx, a.q["editLock"], opts.Consumer, opts.ID).Scan(&status, &replayable, &previous)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("consumer %q holds no message %s: %w; nothing was changed", opts.Consumer, opts.ID, ErrNotFound)
		case err != nil:
			return a.dbError(ctx, "edit message", err)
		case !replayable:
			return fmt.Errorf("message %s is %s: %w: only a dead, discarded or failing message is edited and replayed; nothing was changed",
				opts.ID, status, ErrNotReplayable)
		}
		hash := sha256.Sum256(opts.Payload)
		auditID, err := a.auditStart(ctx, db, auditEntry{action: AuditEditPayload, actor: opts.Actor, note: opts.Note,
			selection: editSelection{Filter: Filter{Consumer: opts.Consumer, IDs: []string{opts.ID}},
				PreviousSHA256: hex.EncodeToString(previous), SHA256: hex.EncodeToString(hash[:])}})
		if err != nil {
			return err
		}
		if _, err := db.Exec(ctx, a.q["edit"], opts.Consumer, opts.ID, auditID, opts.Payload, opts.Note); err != nil {
			return a.dbError(ctx, "edit message", err)
		}
		return a.auditEnd(ctx, db, auditID, nil)
	})
}

// editSelection is what the audit log records of an edit: the message, and
// the SHA-256 of the payload it replaced and of the new one, so that the
// record tells which payload was replaced by which.
type editSelection struct {
	Filter
	// PreviousSHA256 is the replaced payload's SHA-256, in hex.
	PreviousSHA256 string `json:"previous_payload_sha256"`
	// SHA256 is the new payload's SHA-256, in hex.
	SHA256 string `json:"payload_sha256"`
}
