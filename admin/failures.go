package admin

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailureGroup is the dead and failing messages of one consumer that share
// an event type and an error fingerprint.
type FailureGroup struct {
	// Consumer is the consumer whose messages these are.
	Consumer string `json:"consumer"`
	// Count is how many messages are in the group: Dead plus Failing.
	Count int64 `json:"count"`
	// Dead is how many of them are dead.
	Dead int64 `json:"dead"`
	// Error is the last error of one of them, as it was written.
	Error string `json:"error"`
	// EventType is their event type.
	EventType string `json:"event_type"`
	// Failing is how many of them are pending again after a failure
	// (backing off before their next attempt).
	Failing int64 `json:"failing"`
	// Fingerprint identifies the group: give it to Filter.Fingerprint to
	// list or replay the group.
	Fingerprint string `json:"fingerprint"`
	// FirstSeen is when the group's earliest message was received.
	FirstSeen time.Time `json:"first_seen"`
	// LastSeen is when the group's latest message was received.
	LastSeen time.Time `json:"last_seen"`
	// Normalized is the error the group shares, with what varies from one
	// message to the next (ids, quoted values, numbers, timestamps)
	// replaced by placeholders such as <n> and <uuid>.
	Normalized string `json:"normalized_error"`
	// SampleID is the id of one message of the group, to show in full.
	SampleID string `json:"sample_id"`
}

// FailuresOptions says which failures Failures groups.
type FailuresOptions struct {
	// Consumer keeps one consumer's messages. Defaults to "": every
	// consumer's.
	Consumer string

	// Limit is the most groups returned, largest first. Defaults to
	// FailuresLimitDefault (1000).
	Limit int
}

// Failures groups the dead and failing (pending after a failure) messages
// of opts.Consumer (or every consumer) by event type and error
// fingerprint: the error text with ids, quoted values, numbers and
// timestamps replaced by placeholders. Largest groups first, at most
// opts.Limit of them. Replay a group with Filter.Fingerprint.
func (a *Admin) Failures(ctx context.Context, opts FailuresOptions) ([]FailureGroup, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = FailuresLimitDefault
	}
	rows, err := a.pool.Query(ctx, a.q["failures"], nullable(opts.Consumer), limit)
	if err != nil {
		return nil, a.dbError(ctx, "group failures", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailureGroup, error) {
		var g FailureGroup
		var sample *string
		err := r.Scan(&g.Consumer, &g.EventType, &g.Fingerprint, &g.Normalized, &g.Count, &g.Dead,
			&g.FirstSeen, &g.LastSeen, &g.SampleID, &sample)
		if sample != nil {
			g.Error = *sample
		}
		g.Failing = g.Count - g.Dead
		return g, err
	})
	if err != nil {
		return nil, a.dbError(ctx, "group failures", err)
	}
	return out, nil
}
