package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailureGroup is the dead and failing messages of one consumer that share
// an event type and an error pattern: one line of inboxctl failures.
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
	// FailuresInWindow counts the failed attempts of the group's messages
	// within FailuresOptions.Since; 0 when no window was asked for.
	FailuresInWindow int64 `json:"failures_in_window,omitzero"`
	// Fingerprint identifies the group, consumer included: give it to
	// Filter.Fingerprint to list, replay or discard the group.
	Fingerprint string `json:"fingerprint"`
	// FirstFailedAt is the earliest failed attempt recorded in the
	// histories of the group's messages; nil if none is recorded.
	FirstFailedAt *time.Time `json:"first_failed_at"`
	// FirstSeen is when the group's earliest message was received.
	//
	// Deprecated: it is a receive time, kept for scripts written before
	// FirstFailedAt; use FirstFailedAt.
	FirstSeen time.Time `json:"first_seen"`
	// LastFailedAt is the latest failed attempt recorded in the histories
	// of the group's messages; nil if none is recorded.
	LastFailedAt *time.Time `json:"last_failed_at"`
	// LastSeen is when the group's latest message was received.
	//
	// Deprecated: it is a receive time, kept for scripts written before
	// LastFailedAt; use LastFailedAt.
	LastSeen time.Time `json:"last_seen"`
	// Partial is true when Failures read only the newest
	// FailuresReadDefault dead and failing messages and there were more:
	// Count, Dead, Failing, FailuresInWindow and Trend then count the
	// group's messages among those read (the group holds at least as
	// many), and FirstFailedAt and LastFailedAt are those of the messages
	// read (an older message's failures, earlier or later, are not in
	// them). FailuresOptions.Exact reads them all.
	Partial bool `json:"partial,omitzero"`
	// Normalized is the error the group shares, with what varies from one
	// message to the next (ids, quoted values, numbers, timestamps)
	// replaced by placeholders such as <n> and <uuid>.
	Normalized string `json:"normalized_error"`
	// SampleID is the id of one message of the group, to show in full.
	SampleID string `json:"sample_id"`
	// Trend counts the group's failed attempts over time, when
	// FailuresOptions.Buckets asked for it; nil otherwise.
	Trend *Trend `json:"trend,omitempty"`
}

// Trend is a failure group's failed attempts per bucket of equal length,
// from From to the time of the call (database time).
type Trend struct {
	// Bucket is each bucket's length.
	Bucket Duration `json:"bucket_seconds"`
	// Counts has one count per bucket, oldest first; the last bucket ends
	// at the time of the call.
	Counts []int64 `json:"counts"`
	// From is when the first bucket starts.
	From time.Time `json:"from"`
}

// FailuresOptions says which failures Failures groups.
type FailuresOptions struct {
	// Buckets, with Since, splits the window into this many buckets of
	// equal length and counts each group's failed attempts in each
	// (FailureGroup.Trend). Defaults to 0: no trend.
	Buckets int

	// Consumer keeps one consumer's messages. Defaults to "": every
	// consumer's.
	Consumer string

	// Exact reads every dead and failing message, however many: seconds
	// at a million. Defaults to false: only the newest
	// FailuresReadDefault are read, and groups with more are marked
	// Partial.
	Exact bool

	// KeepQuiet, with Since, keeps the groups without a failed attempt in
	// the window too (FailuresInWindow 0), so that one call returns every
	// group with its count in the window. Defaults to false: Since keeps
	// only the groups with one.
	KeepQuiet bool

	// Limit is the most groups returned, largest first. Defaults to
	// FailuresLimitDefault (1000).
	Limit int

	// Since keeps only the groups with a failed attempt in the window that
	// ends now (database time) and is this long, and counts those attempts
	// (FailureGroup.FailuresInWindow). Defaults to 0: every group, however
	// long ago it failed.
	Since time.Duration
}

func (o FailuresOptions) validate() error {
	switch {
	case o.Since < 0:
		return fmt.Errorf("admin: FailuresOptions.Since is %s: use a positive window, or 0 for none", o.Since)
	case o.Buckets < 0:
		return fmt.Errorf("admin: FailuresOptions.Buckets is %d: use a positive count, or 0 for no trend", o.Buckets)
	case o.KeepQuiet && o.Since == 0:
		return errors.New("admin: FailuresOptions.KeepQuiet is set but Since is 0: it keeps the groups quiet in a window; give one, or drop it")
	case o.Buckets > 0 && o.Since == 0:
		return fmt.Errorf("admin: FailuresOptions.Buckets is %d but Since is 0: a trend needs a window to split", o.Buckets)
	}
	return nil
}

// Failures groups the dead and failing (pending after a failure) messages
// of opts.Consumer (or every consumer) by consumer, event type and error
// pattern: the error text with ids, quoted values, numbers and timestamps
// replaced by placeholders. Largest groups first, at most opts.Limit of
// them. Replay a group with Filter.Fingerprint.
//
// Unless opts.Exact, it reads the newest FailuresReadDefault dead and
// failing messages (by arrival), so that it answers in tens of
// milliseconds however many there are; if there were more, every group
// returned is marked Partial, its counts are lower bounds, and a group
// with no message among those read is missing.
//
// What is counted over time (opts.Since, opts.Buckets) is failed attempts,
// as recorded in the histories of the messages still in a group (dead or
// failing): a message that failed and then succeeded, or was discarded, has
// left its group, and its attempts with it.
func (a *Admin) Failures(ctx context.Context, opts FailuresOptions) ([]FailureGroup, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = FailuresLimitDefault
	}
	var window any
	if opts.Since > 0 {
		window = opts.Since.Milliseconds()
	}
	var read any = int64(FailuresReadDefault)
	if opts.Exact {
		read = nil
	}
	rows, err := a.pool.Query(ctx, a.q["failures"], nullable(opts.Consumer), limit, window, opts.Buckets, read, opts.KeepQuiet)
	if err != nil {
		return nil, a.dbError(ctx, "group failures", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailureGroup, error) {
		var (
			g      FailureGroup
			sample *string
			counts []int64
			from   *time.Time
		)
		err := r.Scan(&g.Consumer, &g.EventType, &g.Fingerprint, &g.Normalized, &g.Count, &g.Dead,
			&g.FirstSeen, &g.LastSeen, &g.SampleID, &sample, &g.FirstFailedAt, &g.LastFailedAt, &g.FailuresInWindow,
			&counts, &from, &g.Partial)
		if sample != nil {
			g.Error = *sample
		}
		g.Failing = g.Count - g.Dead
		g.FirstFailedAt, g.LastFailedAt = utc(g.FirstFailedAt), utc(g.LastFailedAt)
		if counts != nil && from != nil {
			g.Trend = &Trend{Bucket: Duration(opts.Since / time.Duration(opts.Buckets)), Counts: counts, From: from.UTC()}
		}
		return g, err
	})
	if err != nil {
		return nil, a.dbError(ctx, "group failures", err)
	}
	return out, nil
}

// GroupKnown reports whether any message the inbox still holds, in any
// status, failed last with an error of failure group fingerprint: true for
// a group replayed to the end (drained), false for a fingerprint no
// failure ever had (a typo, or one printed before fingerprints included
// the consumer). It reads only the rows that ever failed. A malformed
// fingerprint is an error (ValidateFingerprint).
func (a *Admin) GroupKnown(ctx context.Context, fingerprint string) (bool, error) {
	if err := ValidateFingerprint(fingerprint); err != nil {
		return false, err
	}
	var known bool
	if err := a.pool.QueryRow(ctx, a.q["groupKnown"], fingerprint).Scan(&known); err != nil {
		return false, a.dbError(ctx, "find failure group", err)
	}
	return known, nil
}

// utc returns t in UTC, or nil for nil.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
