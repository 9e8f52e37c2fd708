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
	Attempts    int                `json:"attempts"`
	AvailableAt time.Time          `json:"available_at"`
	CreatedAt   time.Time          `json:"created_at"`
	EventType   string             `json:"event_type"`
	ID          uuid.UUID          `json:"id"`
	LastError   *string            `json:"last_error"`
	OrderingKey string             `json:"ordering_key,omitempty"`
	PublishedAt *time.Time         `json:"published_at"`
	Replays     int                `json:"replays"`
	Seq         int64              `json:"seq"`
	Status      pgbox.OutboxStatus `json:"status"`
	Topic       string             `json:"topic"`
}

func (m *OutboxMessage) scanTargets() []any {
	return []any{&m.ID, &m.Seq, &m.Topic, &m.EventType, &m.OrderingKey, &m.Status, &m.Attempts, &m.Replays,
		&m.CreatedAt, &m.AvailableAt, &m.PublishedAt, &m.LastError}
}

// OutboxDetail is one outbox row in full.
type OutboxDetail struct {
	OutboxMessage
	// History lists its failed publishes and operator actions.
	History []HistoryEntry `json:"history"`
	// Metadata is published with it.
	Metadata map[string]string `json:"metadata"`
	// Payload is its body.
	Payload []byte `json:"payload"`
}

// OutboxList calls fn with the outbox rows matching f, newest first, at
// most limit of them (0 or less: all), a page at a time.
func (a *Admin) OutboxList(ctx context.Context, f OutboxFilter, limit int, fn func(OutboxMessage) error) error {
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
		rows, err := a.pool.Query(ctx, a.q["outboxList"], statuses, nullable(f.Topic), below, n)
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
	)
	err := a.pool.QueryRow(ctx, a.q["outboxShow"], id).Scan(append(d.scanTargets(), &d.Payload, &metadata, &raw)...)
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
	return &d, nil
}

// OutboxRetry puts dead outbox rows back to pending, due now, with their
// attempts zeroed and the retry in their history: the rows ids, or every
// dead row when ids is nil. It works in batches and returns how many rows
// it put back.
func (a *Admin) OutboxRetry(ctx context.Context, ids []uuid.UUID, opts BatchOptions) (int64, error) {
	size := opts.BatchSize
	if size <= 0 {
		size = a.cfg.BatchSize
	}
	var filter any
	if ids != nil {
		filter = ids
	}
	var total int64
	for {
		tag, err := a.pool.Exec(ctx, a.q["outboxRetry"], filter, size)
		if err != nil {
			return total, a.dbError(ctx, "retry outbox rows", err)
		}
		total += tag.RowsAffected()
		if opts.Progress != nil && tag.RowsAffected() > 0 {
			opts.Progress(total)
		}
		if tag.RowsAffected() < int64(size) {
			return total, nil
		}
	}
}
