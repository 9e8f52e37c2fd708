package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
)

// OutboxFilter selects outbox rows. Zero fields select everything.
type OutboxFilter struct {
	// OrderingKey keeps the rows of one ordering key.
	OrderingKey string
	// Statuses keeps rows in these statuses.
	Statuses []pgbox.OutboxStatus
	// Topic keeps one topic.
	Topic string
}

// Validate reports a filter that cannot match anything sensible.
func (f OutboxFilter) Validate() error {
	for _, s := range f.Statuses {
		if _, err := pgbox.ParseOutboxStatus(string(s)); err != nil {
			return fmt.Errorf("unknown outbox status %q: use one of %s", s, strings.Join(textArray(pgbox.OutboxStatuses()), ", "))
		}
	}
	return nil
}

// OutboxMessage is an outbox row as operators see it in a list.
type OutboxMessage struct {
	// Attempts is how many publishes have been tried since it was written
	// or last retried.
	Attempts int `json:"attempts"`
	// AvailableAt is when a pending row is next due, or when a running
	// one's lease ends.
	AvailableAt time.Time `json:"available_at"`
	// CreatedAt is when it was written to the outbox.
	CreatedAt time.Time `json:"created_at"`
	// EventType is its event type.
	EventType string `json:"event_type"`
	// ID is its id, which the broker sees as the message id.
	ID uuid.UUID `json:"id"`
	// LastError is its latest failed publish's error; nil if none failed.
	LastError *string `json:"last_error"`
	// OrderingKey is its ordering key; "" for none.
	OrderingKey string `json:"ordering_key,omitempty"`
	// PublishedAt is when the broker acknowledged it; nil until then.
	PublishedAt *time.Time `json:"published_at"`
	// Replays counts the times an operator retried it.
	Replays int `json:"replays"`
	// Seq is its place in the outbox's order.
	Seq int64 `json:"seq"`
	// Status is where it is in its life.
	Status pgbox.OutboxStatus `json:"status"`
	// Topic is the topic it is published to.
	Topic string `json:"topic"`
}

// scanTargets returns m's fields in outboxColumns' order.
func (m *OutboxMessage) scanTargets() []any {
	return []any{&m.ID, &m.Seq, &m.Topic, &m.EventType, &m.OrderingKey, &m.Status, &m.Attempts, &m.Replays,
		&m.CreatedAt, &m.AvailableAt, &m.PublishedAt, &m.LastError}
}

// OutboxDetail is one outbox row in full.
type OutboxDetail struct {
	OutboxMessage
	// BlockedBy is, for a pending row held behind a dead row of its
	// ordering key, that dead row (its ID a UUID); nil for any other row.
	BlockedBy *KeyHolder `json:"blocked_by,omitempty"`
	// History lists its failed publishes and operator actions.
	History []HistoryEntry `json:"history"`
	// Metadata is published with it.
	Metadata map[string]string `json:"metadata"`
	// Payload is its body.
	Payload []byte `json:"payload"`
}

// OutboxListOptions says which outbox rows OutboxList lists.
type OutboxListOptions struct {
	// Filter selects the rows. Defaults to the zero OutboxFilter: every
	// row.
	Filter OutboxFilter

	// Limit is the most rows listed, newest first. Defaults to 0: every
	// matching row (as does any negative limit).
	Limit int
}

// OutboxList calls fn with the outbox rows opts.Filter selects, newest
// first, at most opts.Limit of them, a page at a time. An error from fn
// stops the listing and is returned.
func (a *Admin) OutboxList(ctx context.Context, opts OutboxListOptions, fn func(OutboxMessage) error) error {
	f, limit := opts.Filter, opts.Limit
	if err := f.Validate(); err != nil {
		return err
	}
	var statuses any
	if len(f.Statuses) > 0 {
		statuses = textArray(f.Statuses)
	}
	const page = 500
	var below any
	for sent := 0; limit <= 0 || sent < limit; {
		n := page
		if limit > 0 {
			n = min(page, limit-sent)
		}
		rows, err := a.pool.Query(ctx, a.q["outboxList"], statuses, nullable(f.Topic), below, n, nullable(f.OrderingKey))
		if err != nil {
			return a.dbError(ctx, "list outbox", err)
		}
		got := 0
		var m OutboxMessage
		_, err = pgx.ForEachRow(rows, m.scanTargets(), func() error {
			got++
			below = m.Seq
			return fn(m)
		})
		if err != nil {
			return a.dbError(ctx, "list outbox", err)
		}
		sent += got
		if got < n {
			return nil
		}
	}
	return nil
}

// OutboxShow returns one outbox row in full, or ErrNotFound.
func (a *Admin) OutboxShow(ctx context.Context, id uuid.UUID) (*OutboxDetail, error) {
	var (
		d             OutboxDetail
		metadata, raw []byte
		holder        keyHolderScan
	)
	err := a.pool.QueryRow(ctx, a.q["outboxShow"], id).Scan(append(d.scanTargets(), append([]any{&d.Payload, &metadata, &raw}, holder.targets()...)...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, a.dbError(ctx, "show outbox row", err)
	}
	if err := json.Unmarshal(metadata, &d.Metadata); err != nil {
		d.Metadata = map[string]string{"(undecodable metadata)": string(metadata)}
	}
	if d.History, err = history(raw); err != nil {
		return nil, a.dbError(ctx, "show outbox row", err)
	}
	d.BlockedBy = holder.holder()
	return &d, nil
}

// OutboxRetryOptions says which dead outbox rows OutboxRetry puts back,
// and how.
type OutboxRetryOptions struct {
	// Actor is who retries, as the audit log records it. Defaults to
	// ProcessActor, field by field.
	Actor Actor

	// BatchSize is how many rows one statement puts back. Defaults to
	// Config.BatchSize.
	BatchSize int

	// IDs names the rows to retry; of those, only the dead ones are put
	// back. Defaults to nil: every dead row. An empty but non-nil slice
	// names none.
	IDs []uuid.UUID

	// ProgressFunc, if set, is called after each batch with how many rows
	// have been put back so far. Defaults to nil: no reports.
	ProgressFunc func(retried int64)
}

// OutboxRetry puts dead outbox rows back to pending, due now, with their
// attempts zeroed and the retry in their history: the rows opts.IDs, or
// every dead row. It works in batches, each its own short statement, and
// returns how many rows it put back, also when it fails part way.
func (a *Admin) OutboxRetry(ctx context.Context, opts OutboxRetryOptions) (int64, error) {
	return a.outboxRetry(ctx, a.pool, opts)
}

// OutboxRetryTx is OutboxRetry inside the caller's transaction: the rows
// go back to pending if tx commits, and its batches hold them locked until
// then.
func (a *Admin) OutboxRetryTx(ctx context.Context, tx pgx.Tx, opts OutboxRetryOptions) (int64, error) {
	return a.outboxRetry(ctx, tx, opts)
}

func (a *Admin) outboxRetry(ctx context.Context, db dbtx, opts OutboxRetryOptions) (int64, error) {
	size, err := a.batchSize("OutboxRetryOptions.BatchSize", opts.BatchSize)
	if err != nil {
		return 0, err
	}
	// The ids go as text, cast to uuid[] in SQL: pgx encodes a
	// []uuid.UUID only when it knows the parameter's type, which the exec
	// and simple_protocol query modes never tell it.
	var ids any // NULL: every dead row
	if opts.IDs != nil {
		text := make([]string, len(opts.IDs))
		for i, id := range opts.IDs {
			text[i] = id.String()
		}
		ids = text
	}
	e := auditEntry{action: AuditOutboxRetry, actor: opts.Actor, selection: outboxRetrySelection{AllDead: opts.IDs == nil, IDs: ids}}
	return a.audited(ctx, db, e, func(auditID int64) (int64, error) {
		return a.inBatches(ctx, db, "retry outbox rows", size, opts.ProgressFunc, a.countBatch(a.q["outboxRetry"], func(size int) []any {
			return []any{ids, size, auditID}
		}, outboxRetryLeftSQL, ids))
	})
}

// outboxRetrySelection is an outbox retry's selection in the audit log.
type outboxRetrySelection struct {
	AllDead bool `json:"all_dead,omitzero"`
	IDs     any  `json:"ids,omitzero"`
}
