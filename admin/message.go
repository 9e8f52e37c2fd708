package admin

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
)

// Message is an inbox message as operators see it in a list.
type Message struct {
	// Attempts is how many attempts have been made since it was received
	// or last replayed.
	Attempts int `json:"attempts"`
	// AvailableAt is when a pending message is next due, or when a running
	// one's lease ends.
	AvailableAt time.Time `json:"available_at"`
	// Consumer is the consumer that received it.
	Consumer string `json:"consumer"`
	// EventType is its event type, which picks its handler.
	EventType string `json:"event_type"`
	// ID is its message id, unique per consumer.
	ID string `json:"id"`
	// LastError is its latest failed attempt's error; nil if none failed.
	// A replay keeps it.
	LastError *string `json:"last_error"`
	// MaxAttempts is how many attempts it gets before it is dead.
	MaxAttempts int `json:"max_attempts"`
	// OrderingKey is its ordering key; "" for none.
	OrderingKey string `json:"ordering_key,omitempty"`
	// ProcessedAt is when its handler succeeded; nil until then.
	ProcessedAt *time.Time `json:"processed_at"`
	// ReceivedAt is when the inbox stored it.
	ReceivedAt time.Time `json:"received_at"`
	// Replays counts the times an operator replayed it.
	Replays int `json:"replays"`
	// Seq is its place in the inbox's arrival order.
	Seq int64 `json:"seq"`
	// Status is where it is in its life.
	Status pgbox.InboxStatus `json:"status"`
}

// scanTargets returns m's fields in messageColumns' order.
func (m *Message) scanTargets() []any {
	return []any{&m.Consumer, &m.ID, &m.Seq, &m.EventType, &m.Status, &m.OrderingKey,
		&m.Attempts, &m.MaxAttempts, &m.Replays, &m.ReceivedAt, &m.AvailableAt, &m.ProcessedAt, &m.LastError}
}

// HistoryEntry is one event in a message's history: a failed attempt, or
// an operator's replay or discard.
type HistoryEntry struct {
	// Action is "" for a failed attempt, "replayed", "discarded",
	// "edited" (its payload replaced, by EditAndReplay) or "retried"
	// (outbox) for an operator's action.
	Action string `json:"action,omitempty"`
	// At is when it happened (database time).
	At time.Time `json:"at"`
	// AuditID is the audit record of an edit.
	AuditID int64 `json:"audit_id,omitempty"`
	// Attempt is the failed attempt's number.
	Attempt int `json:"attempt,omitempty"`
	// Error is the failed attempt's error.
	Error string `json:"error,omitempty"`
	// Note is the operator's note on a replay, or the reason for a discard.
	Note string `json:"note,omitempty"`
	// PreviousSize is the size in bytes of the payload an edit replaced
	// (kept in inbox_payload_edits).
	PreviousSize int `json:"previous_size,omitempty"`
	// PreviousAttempts is how many attempts a replayed message had used.
	PreviousAttempts int `json:"previous_attempts,omitempty"`
	// PreviousStatus is the status a replayed message had.
	PreviousStatus pgbox.InboxStatus `json:"previous_status,omitempty"`
	// Replay is the replay's number.
	Replay int `json:"replay,omitempty"`
	// Size is the size in bytes of the payload an edit put in.
	Size int `json:"size,omitempty"`
	// Trace is a panicking attempt's stack.
	Trace string `json:"trace,omitempty"`
}

// history decodes a history column: failed attempts and operator actions
// in the order they happened. Unknown keys are ignored.
func history(raw []byte) ([]HistoryEntry, error) {
	var entries []struct {
		HistoryEntry
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, err
	}
	out := make([]HistoryEntry, len(entries))
	for i, e := range entries {
		out[i] = e.HistoryEntry
		if e.Reason != "" {
			out[i].Note = e.Reason
		}
	}
	return out, nil
}

// KeyHolder is the dead message that holds up a blocked message: the
// first dead message before it of its consumer and ordering key. Nothing
// of the key after it moves until an operator replays or discards it.
type KeyHolder struct {
	// Attempts is how many attempts it used.
	Attempts int `json:"attempts"`
	// DeadSince is when it died: its last failed attempt (database time).
	DeadSince time.Time `json:"dead_since"`
	// ID is its message id.
	ID string `json:"id"`
}

// keyHolderScan receives a show's key-holder columns (id, attempts, dead
// since), NULL for a message that is not blocked.
type keyHolderScan struct {
	id        *string
	attempts  *int
	deadSince *time.Time
}

func (k *keyHolderScan) targets() []any { return []any{&k.id, &k.attempts, &k.deadSince} }

// holder returns the KeyHolder scanned, or nil.
func (k *keyHolderScan) holder() *KeyHolder {
	if k.id == nil {
		return nil
	}
	return &KeyHolder{Attempts: *k.attempts, DeadSince: k.deadSince.UTC(), ID: *k.id}
}

// Detail is one inbox message in full.
type Detail struct {
	Message
	// BlockedBy is, for a pending message held behind a dead message of
	// its ordering key, that dead message; nil for any other message.
	BlockedBy *KeyHolder `json:"blocked_by,omitempty"`
	// Conflicts counts deliveries that reused this id with another payload.
	Conflicts int `json:"conflicts"`
	// History lists its failed attempts and operator actions, oldest first.
	History []HistoryEntry `json:"history"`
	// Metadata is the metadata it was received with.
	Metadata map[string]string `json:"metadata"`
	// Payload is its body.
	Payload []byte `json:"payload"`
}

// ListOptions says which messages List lists.
type ListOptions struct {
	// Filter selects the messages. Defaults to the zero Filter: every
	// message.
	Filter Filter

	// Limit is the most messages listed, newest first. Defaults to 0:
	// every matching message (as does any negative limit).
	Limit int
}

// List calls fn with the messages opts.Filter selects, newest first, at
// most opts.Limit of them. It reads a page at a time, so a large result
// streams instead of piling up in memory. An error from fn stops the
// listing and is returned as is.
func (a *Admin) List(ctx context.Context, opts ListOptions, fn func(Message) error) error {
	f, limit := opts.Filter, opts.Limit
	if err := f.Validate(); err != nil {
		return err
	}
	const page = 500
	var below any // keyset: only messages older (lower seq) than the last one sent
	for sent := 0; limit <= 0 || sent < limit; {
		n := page
		if limit > 0 {
			n = min(page, limit-sent)
		}
		got, last, err := a.listPage(ctx, f, below, n, fn)
		if err != nil {
			return err
		}
		sent += got
		if got < n {
			return nil
		}
		below = last
	}
	return nil
}

// listPage sends one page of List and returns how many messages it sent
// and the seq of the last.
func (a *Admin) listPage(ctx context.Context, f Filter, below any, n int, fn func(Message) error) (int, int64, error) {
	rows, err := a.pool.Query(ctx, a.q["list"], append(f.args(), below, n)...)
	if err != nil {
		return 0, 0, a.dbError(ctx, "list messages", err)
	}
	defer rows.Close()
	var (
		got  int
		last int64
	)
	for rows.Next() {
		var m Message
		if err := rows.Scan(m.scanTargets()...); err != nil {
			return 0, 0, a.dbError(ctx, "list messages", err)
		}
		got, last = got+1, m.Seq
		if err := fn(m); err != nil {
			return 0, 0, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, a.dbError(ctx, "list messages", err)
	}
	return got, last, nil
}

// Show returns one message in full, or ErrNotFound.
func (a *Admin) Show(ctx context.Context, consumer, id string) (*Detail, error) {
	var (
		d        Detail
		raw      []byte
		metadata []byte
		holder   keyHolderScan
	)
	err := a.pool.QueryRow(ctx, a.q["show"], consumer, id).Scan(append(d.scanTargets(), append([]any{&d.Payload, &metadata, &raw, &d.Conflicts},
		holder.targets()...)...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, a.dbError(ctx, "show message", err)
	}
	if err := json.Unmarshal(metadata, &d.Metadata); err != nil {
		// Written behind pgbox's back; show it raw rather than fail.
		d.Metadata = map[string]string{"(undecodable metadata)": string(metadata)}
	}
	if d.History, err = history(raw); err != nil {
		return nil, a.dbError(ctx, "show message", err)
	}
	d.BlockedBy = holder.holder()
	return &d, nil
}

// ConsumersOf returns the consumers that hold message id (at most ten).
func (a *Admin) ConsumersOf(ctx context.Context, id string) ([]string, error) {
	rows, err := a.pool.Query(ctx, a.q["consumersOf"], id)
	if err != nil {
		return nil, a.dbError(ctx, "find message", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, a.dbError(ctx, "find message", err)
	}
	return out, nil
}
