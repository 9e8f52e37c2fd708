package maintenance

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/partition"
)

const (
	// runBudget bounds one run of a job. What is left waits for the next
	// interval; River's rescuer, which re-runs jobs running for an hour, never
	// mistakes a long prune for a stuck one.
	runBudget = 10 * time.Minute
	// statementTimeout bounds one batch's statement.
	statementTimeout = time.Minute
	// maxAttempts is how many times River tries a failed run; the next
	// interval's run comes anyway.
	maxAttempts = 3
)

// aligned is a River periodic schedule on multiples of an interval since
// the zero time: every leader computes the same instants, so a job's
// interval (River's ByPeriod uniqueness) is the same whoever enqueues it.
type aligned time.Duration

func (a aligned) Next(t time.Time) time.Time {
	d := time.Duration(a)
	return t.Truncate(d).Add(d)
}

// periodicJobs are the jobs the leader enqueues: one per interval each,
// and one at once when a client becomes leader (unless that interval has
// had its run).
func (m *Maintainer) periodicJobs() []*river.PeriodicJob {
	jobs := []*river.PeriodicJob{
		river.NewPeriodicJob(aligned(m.cfg.PruneInterval), func() (river.JobArgs, *river.InsertOpts) {
			return pruneArgs{
				BatchSize:          m.cfg.BatchSize,
				EnqueuedBy:         m.client.ID(),
				GenerationPeriodMS: retentionMS(m.cfg.GenerationPeriod),
				InboxRetentionMS:   retentionMS(m.cfg.InboxRetention),
				LockTimeoutMS:      m.cfg.PartitionLockTimeout.Milliseconds(),
				OutboxRetentionMS:  retentionMS(m.cfg.OutboxRetention),
				PartitionsAhead:    m.cfg.PartitionsAhead,
				ProcessRetentionMS: retentionMS(m.cfg.ProcessRetention),
			}, m.insertOpts(m.cfg.PruneInterval)
		}, &river.PeriodicJobOpts{ID: pruneArgs{}.Kind(), RunOnStart: true}),
	}
	if m.cfg.ReplayInterval > 0 {
		jobs = append(jobs, river.NewPeriodicJob(aligned(m.cfg.ReplayInterval), func() (river.JobArgs, *river.InsertOpts) {
			return replayArgs{
				BatchSize:  m.cfg.BatchSize,
				EnqueuedBy: m.client.ID(),
				TickMS:     m.cfg.ReplayInterval.Milliseconds(),
			}, m.insertOpts(m.cfg.ReplayInterval)
		}, &river.PeriodicJobOpts{ID: replayArgs{}.Kind(), RunOnStart: true}))
	}
	return jobs
}

func (m *Maintainer) insertOpts(interval time.Duration) *river.InsertOpts {
	return &river.InsertOpts{
		MaxAttempts: maxAttempts,
		Queue:       Queue,
		UniqueOpts:  river.UniqueOpts{ByPeriod: interval},
	}
}

func retentionMS(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// pruneArgs is a retention run. The leader's configuration travels in the
// args, so every run is done, and recorded, as the leader asked.
type pruneArgs struct {
	BatchSize          int    `json:"batch_size"`
	EnqueuedBy         string `json:"enqueued_by"`
	GenerationPeriodMS int64  `json:"generation_period_ms,omitzero"` // -1: one generation
	InboxRetentionMS   int64  `json:"inbox_retention_ms"`            // -1: keep
	LockTimeoutMS      int64  `json:"lock_timeout_ms,omitzero"`
	OutboxRetentionMS  int64  `json:"outbox_retention_ms"` // -1: keep
	// PartitionsAhead is 0 in the args of a leader too old to know of
	// partitions: that leader's run leaves them alone.
	PartitionsAhead int `json:"partitions_ahead,omitzero"`
	// ProcessRetentionMS is -1 to keep, and 0 in the args of a leader too
	// old to know of the processes table: that leader's run leaves it alone.
	ProcessRetentionMS int64 `json:"process_retention_ms,omitzero"`
}

// Kind names retention runs in river_job.
func (pruneArgs) Kind() string { return "pgbox.prune" }

// pruneOutput is what a retention run did, stored in its job's
// metadata.output.
type pruneOutput struct {
	Deleted    map[string]int64  `json:"deleted"`
	Partial    bool              `json:"partial,omitzero"` // stopped before the end: the next run goes on
	Partitions *partition.Report `json:"partitions,omitempty"`
	Statements int               `json:"statements"`
}

type pruneWorker struct {
	river.WorkerDefaults[pruneArgs]
	m *Maintainer
}

func (w *pruneWorker) Timeout(*river.Job[pruneArgs]) time.Duration { return runBudget }

// Work deletes, table by table, in batches. A deadline or a stop ends the
// run early without failing it: what is left goes with the next run.
func (w *pruneWorker) Work(ctx context.Context, job *river.Job[pruneArgs]) error {
	m, a := w.m, job.Args
	out := pruneOutput{Deleted: map[string]int64{}}
	// A partition change that fails (a statement timeout, a lost
	// connection) stops neither the row-by-row pruning nor the other
	// tables': the run fails after them, and River retries it.
	var err, partErr error
	if a.PartitionsAhead > 0 {
		out.Partitions, partErr = m.maintainPartitions(ctx, a)
	}
	steps := []pruneStep{
		// The partitions dropped take the rows of their day or generation;
		// these are the rows that no partition's drop ever takes.
		{"inbox_default", m.q.pruneInboxDefault, a.InboxRetentionMS},
		{"inbox_conflicts", m.q.pruneConflicts, a.InboxRetentionMS},
		{"outbox_undated", m.q.pruneOutboxUndated, a.OutboxRetentionMS},
		{"outbox_default", m.q.pruneOutboxDefault, a.OutboxRetentionMS},
		{"idempotency_keys", m.q.pruneKeys, 0}, // as soon as they expire
		{"processes", m.q.pruneProcesses, cmp.Or(a.ProcessRetentionMS, -1)},
	}
	if out.Partitions != nil {
		for _, name := range out.Partitions.Crowded {
			steps = append(steps, m.crowdedStep(name, a))
		}
	}
	for _, s := range steps {
		if s.retention < 0 {
			continue
		}
		if err = m.deleteInBatches(ctx, s.table, s.query, s.retention, max(a.BatchSize, 1), &out); err != nil {
			break
		}
	}
	err = errors.Join(partErr, err)
	if err != nil && ctx.Err() != nil {
		out.Partial, err = true, nil
	}
	m.cfg.Logger.DebugContext(ctx, "maintenance: retention run",
		slog.Any("deleted", out.Deleted), slog.Int("statements", out.Statements), slog.Bool("partial", out.Partial),
		slog.Any("partitions", out.Partitions))
	if recErr := river.RecordOutput(ctx, out); recErr != nil {
		err = errors.Join(err, recErr)
	}
	if err != nil {
		m.cfg.Logger.WarnContext(ctx, "maintenance: retention run failed; River retries it", slog.String("error", err.Error()))
	}
	return err
}

// maintainPartitions brings the partitions up to date (partition.Maintain)
// as the leader's args ask: days created ahead, a generation started when
// due, expired partitions dropped (unless their table's retention is
// -1). Each change is counted, and what it postponed is logged: a drop
// that keeps being postponed means the table holds on to expired rows.
func (m *Maintainer) maintainPartitions(ctx context.Context, a pruneArgs) (*partition.Report, error) {
	r, err := partition.Maintain(ctx, m.pool, m.cfg.Schema, partition.Options{
		Ahead:            a.PartitionsAhead,
		GenerationPeriod: time.Duration(a.GenerationPeriodMS) * time.Millisecond,
		InboxRetention:   time.Duration(a.InboxRetentionMS) * time.Millisecond,
		OutboxRetention:  time.Duration(a.OutboxRetentionMS) * time.Millisecond,
		LockTimeout:      time.Duration(cmp.Or(a.LockTimeoutMS, PartitionLockTimeoutDefault.Milliseconds())) * time.Millisecond,
		MaxKept:          maxKeptRows,
	})
	for change, names := range map[string][]string{"created": r.Created, "dropped": r.Dropped, "postponed": r.Postponed} {
		for _, name := range names {
			table, _, _ := strings.Cut(name, "_") // inbox_d20261124, outbox_undated, …
			m.tel.Partition(ctx, table, change)
		}
	}
	if err != nil {
		return &r, err
	}
	for _, p := range r.Dropped {
		m.cfg.Logger.InfoContext(ctx, "maintenance: dropped an expired partition", slog.String("partition", p))
	}
	if len(r.Postponed) > 0 {
		m.cfg.Logger.WarnContext(ctx, "maintenance: partition changes postponed to the next run (their locks were not granted in time, a generation to drop holds a message under a lease, or a partition to drop holds over 10,000 unfinished rows: its expired finished rows are deleted row by row meanwhile)",
			slog.Any("partitions", r.Postponed))
	}
	return &r, nil
}

// pruneStep is one table's row-by-row retention: query deletes a batch of
// its rows finished more than retention milliseconds ago (-1: skip).
type pruneStep struct {
	table     string
	query     string
	retention int64
}

// crowdedStep prunes row by row the expired partition name, which its
// drop postponed for holding too many unfinished rows (dead messages no
// one handled): its finished rows go as they did before partitions, so
// that retention holds until the partition can be dropped.
func (m *Maintainer) crowdedStep(name string, a pruneArgs) pruneStep {
	if strings.HasPrefix(name, partition.Outbox.Name+"_") {
		return pruneStep{name, ident.Render(pruneOutboxSQL(name), m.cfg.Schema), a.OutboxRetentionMS}
	}
	return pruneStep{name, ident.Render(pruneInboxSQL(name), m.cfg.Schema), a.InboxRetentionMS}
}

// maxKeptRows is the most unfinished rows (pending, running, dead) the
// drop of an expired partition moves out while it holds its table
// exclusively: a partition with more waits for them to be handled.
const maxKeptRows = 10_000

// deleteInBatches runs query (a prune statement: up to batch rows older
// than retention milliseconds, from a cursor on) until a batch comes back
// short.
func (m *Maintainer) deleteInBatches(ctx context.Context, table, query string, retention int64, batch int, out *pruneOutput) error {
	cursor := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	for {
		var n int64
		stmtCtx, cancel := context.WithTimeout(ctx, statementTimeout)
		err := m.pool.QueryRow(stmtCtx, query, retention, batch, cursor).Scan(&n, &cursor)
		cancel()
		if err != nil {
			return err
		}
		out.Statements++
		out.Deleted[table] += n
		m.tel.Deleted(ctx, table, n)
		if n < int64(batch) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// replayArgs is a look for due scheduled replays. TickMS is the leader's
// ReplayInterval: a throttled replay replays at most one interval's worth
// of its rate per run.
type replayArgs struct {
	BatchSize  int    `json:"batch_size"`
	EnqueuedBy string `json:"enqueued_by"`
	TickMS     int64  `json:"tick_ms"`
}

// Kind names scheduled-replay runs in river_job.
func (replayArgs) Kind() string { return "pgbox.scheduled_replays" }

type replayWorker struct {
	river.WorkerDefaults[replayArgs]
	m *Maintainer
}

func (w *replayWorker) Timeout(*river.Job[replayArgs]) time.Duration { return runBudget }

// Work runs the due scheduled replays, throttled ones as far as their rate
// allows. Each batch commits with the replay's progress and pace, so a run
// cut short resumes at the next one, without repeating a message or
// exceeding the rate.
func (w *replayWorker) Work(ctx context.Context, job *river.Job[replayArgs]) error {
	m := w.m
	n, err := m.admin.RunDueReplays(ctx, admin.RunDueReplaysOptions{
		BatchSize: job.Args.BatchSize,
		Tick:      time.Duration(job.Args.TickMS) * time.Millisecond,
	})
	m.tel.Replayed(ctx, n)
	partial := err != nil && ctx.Err() != nil
	if partial {
		err = nil
	}
	if n > 0 {
		m.cfg.Logger.DebugContext(ctx, "maintenance: scheduled replays run", slog.Int64("replayed", n), slog.Bool("partial", partial))
	}
	if recErr := river.RecordOutput(ctx, map[string]any{"replayed": n, "partial": partial}); recErr != nil {
		err = errors.Join(err, recErr)
	}
	if err != nil {
		m.cfg.Logger.WarnContext(ctx, "maintenance: scheduled replays failed; River retries the run", slog.String("error", err.Error()))
	}
	return err
}
