package partition

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/internal/ident"
)

// AheadDefault is how many days after today get their partitions in
// advance, unless configured otherwise: a day's partition exists two days
// before it starts, so a maintenance job that misses a day changes nothing.
const AheadDefault = 2

// Options configures Maintain.
type Options struct {
	// Ahead is how many days after today get a partition in advance.
	Ahead int
	// CreateOnly skips starting generations and dropping partitions: what
	// the migrator runs, so that a new schema has today's partitions.
	CreateOnly bool
	// GenerationPeriod is how long an inbox generation takes new undated
	// messages before the next one starts; 0 or less never starts one.
	GenerationPeriod time.Duration
	// InboxRetention and OutboxRetention are how long finished rows are
	// kept: a partition is dropped once every finished row in it is older.
	InboxRetention, OutboxRetention time.Duration
	// LockTimeout bounds each change's wait for its locks.
	LockTimeout time.Duration
	// MaxKept is the most unfinished rows a drop moves out of a partition.
	MaxKept int64
}

// Report is what one run of Maintain did.
type Report struct {
	// Created lists the partitions created.
	Created []string `json:"created,omitempty"`
	// Dropped lists the partitions dropped.
	Dropped []string `json:"dropped,omitempty"`
	// Generation is the inbox generation started, or 0 for none.
	Generation int32 `json:"generation,omitempty"`
	// Kept counts the unfinished rows moved out of dropped partitions.
	Kept int64 `json:"kept,omitempty"`
	// Postponed lists the changes left to a later run: their locks were
	// not granted within the lock timeout, a partition to drop held more
	// than MaxKept unfinished rows, or a generation to drop a row under a
	// lease. A partition whose rows finished within the window is not
	// due yet, and not listed.
	Postponed []string `json:"postponed,omitempty"`
	// Crowded lists the expired partitions kept for holding more than
	// MaxKept unfinished rows: until those are handled, their expired
	// finished rows must be deleted row by row.
	Crowded []string `json:"crowded,omitempty"`
}

// Maintain brings schema's partitions up to date, by the database's clock:
// it creates each table's day partitions from today to opts.Ahead days
// after, starts a new inbox generation once the current one is
// opts.GenerationPeriod old, and drops the partitions whose finished rows
// are all past their retention. A change whose locks are not granted in
// time is postponed, not failed.
func Maintain(ctx context.Context, db DB, schema string, opts Options) (Report, error) {
	var (
		r   Report
		now time.Time
	)
	if err := db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return r, fmt.Errorf("read the database's clock: %w", err)
	}
	for _, t := range []*Table{Inbox, Outbox} {
		if err := maintain(ctx, db, schema, t, now, opts, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// maintain is Maintain for one table.
func maintain(ctx context.Context, db DB, schema string, t *Table, now time.Time, opts Options, r *Report) error {
	state, err := ReadState(ctx, db, schema, t)
	if err != nil {
		return err
	}
	parts, err := List(ctx, db, schema, t)
	if err != nil {
		return err
	}
	today := DayOf(now)
	for d := max(state.Origin, today); d <= today+Day(opts.Ahead); d++ {
		if hasPartition(parts, t.DayPartition(d)) {
			continue
		}
		if err := postponable(CreateDay(ctx, db, schema, t, d, opts.LockTimeout), t.DayPartition(d).Name, r); err != nil {
			return err
		}
		r.Created = append(r.Created, t.DayPartition(d).Name)
	}
	if opts.CreateOnly {
		return nil
	}
	retention := opts.OutboxRetention
	if t.generations {
		retention = opts.InboxRetention
		if opts.GenerationPeriod > 0 && now.Sub(state.GenerationStartedAt) >= opts.GenerationPeriod {
			err := StartGeneration(ctx, db, schema, state.Generation, opts.LockTimeout)
			if err := postponable(err, t.GenerationPartition(state.Generation+1).Name, r); err != nil {
				return err
			}
			if err == nil {
				state.Generation++ // the one before is now past: it may go below
				r.Generation = state.Generation
			}
		}
	}
	if retention < 0 { // kept for ever: nothing expires
		return nil
	}
	for _, p := range parts {
		if !expired(p, state, now, retention) {
			continue
		}
		c, err := droppable(ctx, db, schema, t, p, retention)
		if err != nil {
			return err
		}
		if why := c.keep(p, opts.MaxKept); why != "" {
			r.keep(p.Name, why)
			continue
		}
		res, err := Drop(ctx, db, schema, t, p, retention, opts.MaxKept, opts.LockTimeout)
		if err := postponable(err, p.Name, r); err != nil {
			return err
		}
		switch {
		case res.Dropped:
			r.Dropped = append(r.Dropped, p.Name)
			r.Kept += res.Kept
		case res.Why != "":
			r.keep(p.Name, res.Why)
		}
	}
	return nil
}

// keep records in r that the expired partition name stays, and why: a
// partition whose rows finished within the window is not due yet, and not
// reported.
func (r *Report) keep(name, why string) {
	switch why {
	case KeepRecent:
		return
	case KeepCrowded:
		r.Crowded = append(r.Crowded, name)
	}
	r.Postponed = append(r.Postponed, name)
}

// postponable returns nil for a nil error, and for ErrLockTimeout after
// recording name as postponed in r; any other error as it is.
func postponable(err error, name string, r *Report) error {
	if errors.Is(err, ErrLockTimeout) {
		r.Postponed = append(r.Postponed, name)
		return nil
	}
	return err
}

// expired reports whether p may be old enough to drop: a day that ended
// before the retention window began, or a generation before the current
// one. Whether it is (every finished row in it past the window) is read
// from its rows.
func expired(p Partition, s State, now time.Time, retention time.Duration) bool {
	switch p.Kind {
	case KindDay:
		return !(p.Day + 1).Time().After(now.Add(-retention))
	case KindGeneration:
		return p.Generation < s.Generation
	}
	return false
}

// droppable reads, without locks, whether Drop would drop p now (see
// contents.keep). Drop checks again under its locks; this saves it taking
// them in vain.
func droppable(ctx context.Context, db DB, schema string, t *Table, p Partition, retention time.Duration) (contents, error) {
	c, err := t.contents(ctx, db, ident.Quote(schema)+"."+ident.Quote(p.Name), retention)
	if err != nil {
		return c, fmt.Errorf("read whether %s can be dropped: %w", p.Name, err)
	}
	return c, nil
}

// rowQuerier is a pool, a connection or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// contents is what decides whether an expired partition can be dropped.
type contents struct {
	// recent reports whether a row in it finished within the retention
	// window.
	recent bool
	// unfinished counts its rows that a drop would move out (pending,
	// running, dead, discarded); running, those a worker holds.
	unfinished, running int64
}

// keep reports why p, expired, must stay for now, or "" when it can be
// dropped: a row finished within the window; a generation's row is held
// under a lease (its worker records the outcome by the row's bucket, which
// the move to the current generation would change); or more than maxKept
// rows would move while the drop holds the table (crowded).
func (c contents) keep(p Partition, maxKept int64) string {
	switch {
	case c.recent:
		return KeepRecent
	case p.Kind == KindGeneration && c.running > 0:
		return KeepLeased
	case c.unfinished > maxKept:
		return KeepCrowded
	}
	return ""
}

// Why an expired partition stays (DropResult.Why).
const (
	// KeepRecent: a row in it finished within the retention window.
	KeepRecent = "recent"
	// KeepLeased: a generation holds a message under a lease.
	KeepLeased = "leased"
	// KeepCrowded: it holds more unfinished rows than a drop may move.
	KeepCrowded = "crowded"
)

// contents reads, of the partition named name (quoted), whether a row in
// it finished within retention, and how many are unfinished and running.
func (t *Table) contents(ctx context.Context, q rowQuerier, name string, retention time.Duration) (contents, error) {
	var c contents
	err := q.QueryRow(ctx, t.contentsSQL(name, retention)).Scan(&c.recent, &c.unfinished, &c.running)
	return c, err
}

// contentsSQL is contents' statement. Each status is counted from its own
// partial index: a list of statuses matches none of them, and would read
// the whole partition.
func (t *Table) contentsSQL(name string, retention time.Duration) string {
	window := strconv.FormatInt(retention.Milliseconds(), 10) + " * interval '1 millisecond'"
	count := func(status string) string { return "(SELECT count(*) FROM " + name + " WHERE status = " + status + ")" }
	unfinished := make([]string, len(t.unfinished))
	for i, s := range t.unfinished {
		unfinished[i] = count(s)
	}
	return "SELECT EXISTS (SELECT 1 FROM " + name + " WHERE status = " + t.done + " AND " + t.doneAt + " >= now() - " + window + "), " +
		strings.Join(unfinished, " + ") + ", " + count(t.running)
}
