// Package admin is what operators need to see and steer pgbox's inbox and
// outbox: counts, lists, one message in full, failures grouped by cause,
// bulk replays, discards and purges that work in bounded batches, and
// pauses of a consumer or of one of its event types (Pause, Resume). The
// inboxctl command is a thin shell around it; services can use it too (a
// status page, a scheduled replay).
//
// Replays never touch a message that is running (a worker holds it) or
// done (running its handler again would defeat the inbox's dedupe). Every
// replay and discard is recorded in the message's history, next to its
// failed attempts, and replays are counted on the row.
//
// # Audit
//
// Every write (Replay, Discard, Purge, ScheduleReplay and
// CancelScheduledReplay, OutboxRetry, EditAndReplay, Pause, Resume and
// ReleaseLeases) is recorded in the audit log (AuditLog): who (the
// options' Actor, by default this process), from where, when, the
// selection, the note and how many rows it changed.
// The record is written before the first batch, and each batch adds its
// count to it in the statement that makes the change, so the count is
// always what committed: an action interrupted part way ends as
// AuditInterrupted with the count it reached, and one whose process died
// stays AuditRunning with the count of its committed batches.
//
// # Transactions
//
// Each write comes in a pair, as in River: Replay and ReplayTx, Discard and
// DiscardTx, Purge and PurgeTx, OutboxRetry and OutboxRetryTx,
// ScheduleReplay and ScheduleReplayTx, CancelScheduledReplay and
// CancelScheduledReplayTx, Pause and PauseTx, Resume and ResumeTx,
// ReleaseLeases and ReleaseLeasesTx. The plain form runs on the pool; a
// bulk one runs each batch as its own short statement, so a
// million-message replay never holds one giant lock or transaction. The Tx
// form runs inside the caller's
// pgx.Tx and commits nothing itself: its changes take effect if, and when,
// the caller commits, together with the caller's own writes (an audit row,
// say). A bulk Tx form still works in batches, but holds every row it
// changes locked until the caller's transaction ends, so keep it to
// selections of modest size.
package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/schemaerr"
)

// ErrNotFound is returned when a message asked for by id does not exist.
var ErrNotFound = errors.New("not found")

// ErrInvalidPattern is wrapped by the error of a read or change whose
// Filter.ErrorMatches PostgreSQL does not take as a regular expression.
// Nothing was read or changed.
var ErrInvalidPattern = errors.New("the error pattern is not a valid regular expression")

const (
	// BatchSizeDefault is the default Config.BatchSize: how many rows one
	// statement of a bulk operation touches.
	BatchSizeDefault = 1000
	// FailuresLimitDefault is the default FailuresOptions.Limit.
	FailuresLimitDefault = 1000
	// FailuresReadDefault is how many dead and failing messages, the
	// newest, Failures reads unless FailuresOptions.Exact: reading one
	// costs about 20µs, mostly the error pattern's regular expressions.
	FailuresReadDefault = 2000
	// ScheduledReplaysLimitDefault is how many scheduled replays
	// ScheduledReplays lists when given no limit.
	ScheduledReplaysLimitDefault = 100
)

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
		"countScheduled": countScheduledSQL, "groupKnown": groupKnownSQL, "doneExact": doneExactSQL,
		"estimate": estimateSQL, "publishedExact": publishedExactSQL, "auditStart": auditStartSQL, "auditEnd": auditEndSQL, "auditLog": auditLogSQL,
		"editLock": editLockSQL, "edit": editSQL,
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

// dbtx is what admin's statements need of a pool or a transaction: the
// plain methods run them on the pool, the …Tx ones on the caller's pgx.Tx.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// batchSize returns size, or Config.BatchSize for 0; a negative size is
// an error naming field.
func (a *Admin) batchSize(field string, size int) (int, error) {
	if size < 0 {
		return 0, fmt.Errorf("admin: %s is %d: use a positive size, or 0 for Config.BatchSize (%d)", field, size, a.cfg.BatchSize)
	}
	return cmp.Or(size, a.cfg.BatchSize), nil
}

// dbError explains err, with the command to run when the schema is missing
// or outdated. It asks the pool, not the statement's transaction, which
// may be aborted by then.
func (a *Admin) dbError(ctx context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "2201B" { // invalid_regular_expression
		return fmt.Errorf("%s: %w: %s", op, ErrInvalidPattern, strings.TrimPrefix(pgErr.Message, "invalid regular expression: "))
	}
	return fmt.Errorf("%s: %w", op, schemaerr.Explain(ctx, a.pool, a.cfg.Schema, err))
}

// nullable returns s, or nil (SQL NULL: no condition) when s is empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
