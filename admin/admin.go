// Package admin is what operators need to see and steer pgbox's inbox and
// outbox: counts, lists, one message in full, failures grouped by cause,
// and bulk replays, discards and purges that work in bounded batches. The
// inboxctl command is a thin shell around it; services can use it too (a
// status page, a scheduled replay).
//
// Replays never touch a message that is running (a worker holds it) or
// done (running its handler again would defeat the inbox's dedupe). Every
// replay and discard is recorded in the message's history, next to its
// failed attempts, and replays are counted on the row.
package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/schemaerr"
)

// ErrNotFound is returned when a message asked for by id does not exist.
var ErrNotFound = errors.New("not found")

// BatchSizeDefault is the default Config.BatchSize: how many rows one
// statement of a bulk operation touches.
const BatchSizeDefault = 1000

// Config configures an Admin.
type Config struct {
	// BatchSize is how many rows one statement of a bulk operation
	// (Replay, Discard, Purge, OutboxRetry, RunDueReplays) touches when the
	// operation's own options leave it unset. Smaller batches hold fewer
	// locks for less time; larger ones take fewer round trips. Defaults to
	// BatchSizeDefault (1000).
	BatchSize int

	// Schema is the PostgreSQL schema holding pgbox's tables. Defaults to
	// pgbox.DefaultSchema.
	Schema string
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Schema = cmp.Or(c.Schema, pgbox.DefaultSchema)
	return c
}

func (c Config) validate() error {
	if c.BatchSize < 1 {
		return fmt.Errorf("admin: Config.BatchSize is %d: use a positive size, or 0 for the default (%d)", c.BatchSize, BatchSizeDefault)
	}
	if err := ident.ValidateSchema(c.Schema); err != nil {
		return fmt.Errorf("admin: Config.Schema: %w", err)
	}
	return nil
}

// Admin reads and steers one schema's inbox and outbox. It is safe for
// concurrent use.
type Admin struct {
	cfg  Config
	pool *pgxpool.Pool
	q    map[string]string
}

// New returns an Admin for cfg.Schema. It does not touch the database: a
// schema that is missing or at the wrong version is reported by Check, or
// by the first call that needs it, with the command that fixes it.
func New(pool *pgxpool.Pool, cfg Config) (*Admin, error) {
	if pool == nil {
		return nil, errors.New("admin: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q := map[string]string{}
	for name, sql := range map[string]string{
		"list": listSQL, "show": showSQL, "consumersOf": consumersOfSQL, "count": countSQL,
		"replay": replayBatchSQL, "discard": discardBatchSQL, "idStatus": idStatusSQL, "purge": purgeBatchSQL,
		"countPurgeable": countPurgeableSQL, "failures": failuresSQL, "stats": statsSQL, "outboxStats": outboxStatsSQL,
		"outboxList": outboxListSQL, "outboxShow": outboxShowSQL, "outboxRetry": outboxRetrySQL,
		"scheduleReplay": scheduleReplaySQL, "scheduledReplays": scheduledReplaysSQL, "cancelReplay": cancelReplaySQL,
		"claimDueReplay": claimDueReplaySQL, "advanceReplay": advanceReplaySQL, "failReplay": failReplaySQL,
		"countScheduled": countScheduledSQL,
	} {
		q[name] = ident.Render(sql, cfg.Schema)
	}
	return &Admin{cfg: cfg, pool: pool, q: q}, nil
}

// Schema returns the schema this Admin works on.
func (a *Admin) Schema() string { return a.cfg.Schema }

// Check reports whether the database is reachable and the schema migrated
// to this build's version, with pgbox.CheckSchema's clear errors.
func (a *Admin) Check(ctx context.Context) error {
	return pgbox.CheckSchema(ctx, a.pool, a.cfg.Schema)
}

// Filter selects inbox messages. Zero fields select everything. It encodes
// as JSON (a scheduled replay stores its filter), leaving out zero fields.
type Filter struct {
	// Consumer keeps one consumer's messages.
	Consumer string `json:"consumer,omitzero"`
	// ErrorContains keeps messages whose last error contains this text,
	// ignoring case.
	ErrorContains string `json:"error_contains,omitzero"`
	// ErrorMatches keeps messages whose last error matches this
	// (PostgreSQL, case-insensitive) regular expression.
	ErrorMatches string `json:"error_matches,omitzero"`
	// EventType keeps one event type.
	EventType string `json:"event_type,omitzero"`
	// Fingerprint keeps one failure group (see Failures).
	Fingerprint string `json:"fingerprint,omitzero"`
	// IDs keeps these message ids.
	IDs []string `json:"ids,omitzero"`
	// ReplayableOnly keeps the messages Replay may touch: dead, discarded,
	// or pending after a failure.
	ReplayableOnly bool `json:"replayable_only,omitzero"`
	// Since keeps messages received at or after it.
	Since time.Time `json:"since,omitzero"`
	// Statuses keeps messages in these statuses.
	Statuses []pgbox.InboxStatus `json:"statuses,omitzero"`
	// Until keeps messages received before it.
	Until time.Time `json:"until,omitzero"`
}

// Validate reports a filter that cannot match anything sensible.
func (f Filter) Validate() error {
	for _, s := range f.Statuses {
		if _, err := pgbox.ParseInboxStatus(string(s)); err != nil {
			return err
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return fmt.Errorf("until (%s) is not after since (%s)", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	return nil
}

// args returns the filter as filterSQL's parameters $1 to $10.
func (f Filter) args() []any {
	null := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var statuses, ids any
	if len(f.Statuses) > 0 {
		statuses = textArray(f.Statuses)
	}
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	var since, until any
	if !f.Since.IsZero() {
		since = f.Since
	}
	if !f.Until.IsZero() {
		until = f.Until
	}
	return []any{null(f.Consumer), statuses, null(f.EventType), since, until,
		null(f.ErrorContains), null(f.ErrorMatches), null(f.Fingerprint), ids, f.ReplayableOnly}
}

// textArray returns statuses as the plain strings a text[] parameter takes.
func textArray[S ~string](statuses []S) []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// BatchOptions tunes a bulk operation.
type BatchOptions struct {
	// BatchSize is how many rows one statement touches. Defaults to
	// Config.BatchSize.
	BatchSize int
	// Progress, if set, is called after each batch with the total so far.
	Progress func(done int64)
}

// dbError explains err, with the command to run when the schema is missing
// or outdated.
func (a *Admin) dbError(ctx context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "2201B" { // invalid_regular_expression
		return fmt.Errorf("%s: the error pattern is not a valid regular expression: %s", op, pgErr.Message)
	}
	return fmt.Errorf("%s: %w", op, schemaerr.Explain(ctx, a.pool, a.cfg.Schema, err))
}
