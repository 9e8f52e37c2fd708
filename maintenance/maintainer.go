package maintenance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/liveness"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/telemetry"
)

const (
	// BatchSizeDefault is the default Config.BatchSize.
	BatchSizeDefault = 1000
	// InboxRetentionDefault is the default Config.InboxRetention: longer
	// than any producer's or broker's redelivery window is likely to be.
	InboxRetentionDefault = 7 * 24 * time.Hour
	// IntervalMin is the shortest Config.PruneInterval and
	// Config.ReplayInterval: River makes each job unique per interval, to the
	// second.
	IntervalMin = time.Second
	// OutboxRetentionDefault is the default Config.OutboxRetention.
	OutboxRetentionDefault = 7 * 24 * time.Hour
	// PartitionLockTimeoutDefault is the default Config.PartitionLockTimeout.
	PartitionLockTimeoutDefault = time.Second
	// PartitionsAheadDefault is the default Config.PartitionsAhead.
	PartitionsAheadDefault = partition.AheadDefault
	// ProcessRetentionDefault is the default Config.ProcessRetention.
	ProcessRetentionDefault = 24 * time.Hour
	// ProcessRetentionMin is the shortest Config.ProcessRetention: a
	// process is not pruned before it has had time to be seen dead.
	ProcessRetentionMin = time.Minute
	// PruneIntervalDefault is the default Config.PruneInterval.
	PruneIntervalDefault = time.Minute
	// Queue is the River queue the maintenance jobs run on.
	Queue = "pgbox_maintenance"
	// ReplayIntervalDefault is the default Config.ReplayInterval.
	ReplayIntervalDefault = 30 * time.Second
)

// Config configures a Maintainer.
type Config struct {
	// BatchSize is how many rows one statement deletes (or one scheduled
	// replay's batch replays). Defaults to BatchSizeDefault (1000).
	BatchSize int

	// ID names this process in River's leader election (river_leader's
	// leader_id) and in the jobs it enqueues and works: a pod or host name,
	// say. It must be unique among the processes sharing the schema.
	// Defaults to River's: the host name and the time the client was
	// created.
	ID string

	// GenerationPeriod is how long one inbox generation takes new messages
	// whose ids are undated, no UUIDv7 and received without an
	// inbox.Message.IDTime (see docs/design.md, "Partitions"): each
	// generation is dropped whole once its done messages are all past
	// InboxRetention, and a receive of such an id looks it up in the
	// generations before the current one. A shorter period keeps less past
	// the window (the last generation's rows wait for its newest) at the
	// cost of one more lookup per generation. Defaults to InboxRetention,
	// and to never when that is -1 (keep for ever: one generation).
	GenerationPeriod time.Duration

	// InboxRetention is how long done messages are kept after they were
	// processed: the window in which a redelivery is still recognised as a
	// duplicate. Keep it longer than any producer's retry window. Conflict
	// records are kept as long. Done messages go when their partition
	// goes, a day's (or a generation's) at a time, once every done message
	// in it is older: kept at least this long, at most about a day more
	// (GenerationPeriod more for undated ids). Defaults to
	// InboxRetentionDefault (7 days); -1 keeps them for ever.
	InboxRetention time.Duration

	// Logger receives the jobs' failures at warn and error, and a summary
	// of each run at debug. River's own logs are passed on from warn up.
	// Defaults to slog.Default().
	Logger *slog.Logger

	// MeterProvider receives the rows each run deleted and the messages
	// scheduled replays replayed (see docs/operations.md). Defaults to
	// OpenTelemetry's global provider, which does nothing until one is
	// installed.
	MeterProvider metric.MeterProvider

	// OutboxRetention is how long published outbox rows are kept, a day's
	// partition at a time as InboxRetention. Defaults to
	// OutboxRetentionDefault (7 days); -1 keeps them for ever.
	OutboxRetention time.Duration

	// PartitionLockTimeout bounds how long each change to the partitions
	// (a day's partition created ahead, a generation started, an expired
	// partition dropped) waits for its locks, and so how long receives,
	// claims and reads of the inbox or outbox can wait behind it: a drop
	// takes the table exclusively while it moves the partition's few
	// unfinished rows out. A change not granted its locks in time is tried
	// again at the next run. Defaults to PartitionLockTimeoutDefault (1s).
	PartitionLockTimeout time.Duration

	// PartitionsAhead is how many days after today get their inbox and
	// outbox partitions in advance. Until a day has its partition, its
	// messages wait in the default partition and are moved when it is
	// made. Defaults to PartitionsAheadDefault (2); at least 1.
	PartitionsAhead int

	// PollOnly puts River's client in poll-only mode (river.Config.PollOnly):
	// it opens no LISTEN connection, and learns of leadership changes and
	// new jobs by polling. Set it when the pool goes through a
	// transaction-pooling PgBouncer, where River's listener, which takes a
	// connection from the pool, would hear nothing: without it, Start
	// checks that a notification sent through the pool comes back to a
	// LISTEN made as River's, and when it does not, logs a warning that
	// names this field (once; maintenance goes on). The maintenance jobs
	// are periodic, so polling costs them nothing that matters; a new
	// leader is elected at River's poll pace after the old one stops.
	// Defaults to false.
	PollOnly bool

	// ProcessHeartbeat is how often the maintainer touches its row in the
	// schema's processes table (inboxctl processes) while it runs. A
	// maintainer not seen for pgbox.ProcessDeadAfter (3) heartbeats shows
	// as dead. Defaults to pgbox.ProcessHeartbeatDefault (10 seconds); at
	// least pgbox.ProcessHeartbeatMin.
	ProcessHeartbeat time.Duration

	// ProcessName names this maintainer in the processes table: a pod
	// name, say. Defaults to the host name and process id ("host:4242").
	ProcessName string

	// ProcessRetention is how long the retention job keeps the row of a
	// process not seen since (one that died, or was killed, without a
	// clean Stop): long enough for operators to see what died. Defaults to
	// ProcessRetentionDefault (one day); at least ProcessRetentionMin; -1
	// keeps them for ever.
	ProcessRetention time.Duration

	// PruneInterval is how often the retention job runs. Intervals are
	// aligned to the clock. Defaults to PruneIntervalDefault (one minute);
	// at least IntervalMin.
	PruneInterval time.Duration

	// ReplayInterval is how often due scheduled replays are looked for,
	// which bounds how late one starts. It is also the step of a throttled
	// replay (inboxctl replay --rate): each run replays what the rate
	// allowed since the one before, at most rate × ReplayInterval, so a
	// shorter interval gives smaller, more frequent steps. Defaults to
	// ReplayIntervalDefault (30 seconds); at least IntervalMin; -1 never
	// runs them.
	ReplayInterval time.Duration

	// Schema is the PostgreSQL schema holding pgbox's (and River's) tables.
	// River's client accepts letters, digits and underscores only, up to 46
	// bytes. Defaults to pgbox.DefaultSchema.
	Schema string
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.InboxRetention = cmp.Or(c.InboxRetention, InboxRetentionDefault)
	c.GenerationPeriod = cmp.Or(c.GenerationPeriod, c.InboxRetention)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.OutboxRetention = cmp.Or(c.OutboxRetention, OutboxRetentionDefault)
	c.PartitionLockTimeout = cmp.Or(c.PartitionLockTimeout, PartitionLockTimeoutDefault)
	c.PartitionsAhead = cmp.Or(c.PartitionsAhead, PartitionsAheadDefault)
	c.ProcessHeartbeat = cmp.Or(c.ProcessHeartbeat, pgbox.ProcessHeartbeatDefault)
	c.ProcessRetention = cmp.Or(c.ProcessRetention, ProcessRetentionDefault)
	c.PruneInterval = cmp.Or(c.PruneInterval, PruneIntervalDefault)
	c.ReplayInterval = cmp.Or(c.ReplayInterval, ReplayIntervalDefault)
	c.Schema = cmp.Or(c.Schema, pgbox.DefaultSchema)
	return c
}

// riverSchemaRE is what River's client accepts as a schema name, and
// riverSchemaMax its length limit (63 bytes less the longest notification
// topic, "river_leadership", and a dot).
var riverSchemaRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

const riverSchemaMax = 46

func (c Config) validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if c.BatchSize < 1 {
		add("Config.BatchSize is %d: it must be at least 1", c.BatchSize)
	}
	if c.InboxRetention < 0 && c.InboxRetention != -1 {
		add("Config.InboxRetention is %s: use a positive duration, 0 for the default or -1 to keep done messages", c.InboxRetention)
	}
	if c.OutboxRetention < 0 && c.OutboxRetention != -1 {
		add("Config.OutboxRetention is %s: use a positive duration, 0 for the default or -1 to keep published rows", c.OutboxRetention)
	}
	if c.GenerationPeriod < time.Minute && c.GenerationPeriod != -1 {
		add("Config.GenerationPeriod is %s: use at least a minute, 0 for the default or -1 for one generation for ever", c.GenerationPeriod)
	}
	if c.PartitionLockTimeout < time.Millisecond {
		add("Config.PartitionLockTimeout is %s: it must be at least a millisecond", c.PartitionLockTimeout)
	}
	if c.PartitionsAhead < 1 {
		add("Config.PartitionsAhead is %d: it must be at least 1 (0 for the default, %d)", c.PartitionsAhead, PartitionsAheadDefault)
	}
	if c.ProcessHeartbeat < pgbox.ProcessHeartbeatMin {
		add("Config.ProcessHeartbeat is %s: it must be at least %s", c.ProcessHeartbeat, pgbox.ProcessHeartbeatMin)
	}
	if c.ProcessRetention < ProcessRetentionMin && c.ProcessRetention != -1 {
		add("Config.ProcessRetention is %s: use at least %s, 0 for the default or -1 to keep the rows of dead processes", c.ProcessRetention, ProcessRetentionMin)
	}
	if c.PruneInterval < IntervalMin {
		add("Config.PruneInterval is %s: it must be at least %s", c.PruneInterval, IntervalMin)
	}
	if c.ReplayInterval < IntervalMin && c.ReplayInterval != -1 {
		add("Config.ReplayInterval is %s: it must be at least %s, or -1 to run no scheduled replays", c.ReplayInterval, IntervalMin)
	}
	if err := ident.ValidateSchema(c.Schema); err != nil {
		add("Config.Schema: %v", err)
	} else if len(c.Schema) > riverSchemaMax || !riverSchemaRE.MatchString(c.Schema) {
		add("Config.Schema %q cannot hold River's client: River accepts letters, digits and underscores, starting with a letter or underscore, up to %d bytes", c.Schema, riverSchemaMax)
	}
	if len(problems) > 0 {
		return errors.New("maintenance: " + strings.Join(problems, "; "))
	}
	return nil
}

// Maintainer runs the maintenance jobs in one process. Create it with New,
// then Start it and Stop it once.
type Maintainer struct {
	admin  *admin.Admin
	cfg    Config
	client *river.Client[pgx.Tx]
	pool   *pgxpool.Pool
	proc   *liveness.Process // its row in the processes table
	q      queries
	tel    *telemetry.Maintenance

	mu        sync.Mutex
	started   bool
	stopping  bool
	stopOnce  sync.Once
	stopped   chan struct{}
	probeStop chan struct{} // closed by Stop: end the self-check (see startProbe)
	probeDone chan struct{} // closed when the self-check has ended; nil if none ran
}

type queries struct {
	pruneConflicts, pruneInboxDefault, pruneKeys, pruneOutboxDefault, pruneOutboxUndated, pruneProcesses string
}

// New returns a Maintainer. It checks the configuration but does not touch
// the database; Start does.
func New(pool *pgxpool.Pool, cfg Config) (*Maintainer, error) {
	if pool == nil {
		return nil, errors.New("maintenance: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	adm, err := admin.New(pool, admin.Config{Schema: cfg.Schema})
	if err != nil {
		return nil, fmt.Errorf("maintenance: %w", err)
	}
	m := &Maintainer{
		admin: adm,
		cfg:   cfg,
		pool:  pool,
		q: queries{
			pruneConflicts:     ident.Render(pruneConflictsSQL, cfg.Schema),
			pruneInboxDefault:  ident.Render(pruneInboxSQL(partition.Inbox.Default().Name), cfg.Schema),
			pruneKeys:          ident.Render(pruneKeysSQL, cfg.Schema),
			pruneOutboxDefault: ident.Render(pruneOutboxSQL(partition.Outbox.Default().Name), cfg.Schema),
			pruneOutboxUndated: ident.Render(pruneOutboxSQL(partition.Outbox.Undated().Name), cfg.Schema),
			pruneProcesses:     ident.Render(pruneProcessesSQL, cfg.Schema),
		},
		stopped:   make(chan struct{}),
		probeStop: make(chan struct{}),
		tel:       telemetry.NewMaintenance(cfg.MeterProvider),
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &pruneWorker{m: m})
	river.AddWorker(workers, &replayWorker{m: m})
	m.client, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:           cfg.ID,
		Logger:       slog.New(levelFloor{Handler: cfg.Logger.Handler(), min: slog.LevelWarn}),
		PeriodicJobs: m.periodicJobs(),
		PollOnly:     cfg.PollOnly,
		Queues:       map[string]river.QueueConfig{Queue: {MaxWorkers: 2}},
		Schema:       cfg.Schema,
		Workers:      workers,
	})
	if err != nil {
		return nil, fmt.Errorf("maintenance: river: %w", err)
	}
	m.proc = liveness.New(pool, liveness.Config{Heartbeat: cfg.ProcessHeartbeat, Kind: pgbox.ProcessMaintainer,
		Logger: cfg.Logger, Name: cfg.ProcessName, RiverID: m.client.ID, Schema: cfg.Schema})
	return m, nil
}

// ID returns the identity of this process's River client: the leader_id
// of river_leader while it leads, and the name in the jobs'
// args.enqueued_by and attempted_by.
func (m *Maintainer) ID() string { return m.client.ID() }

// Start checks that the database is reachable and the schema migrated,
// River's tables included, then joins River's leader election, starts
// working maintenance jobs and registers the maintainer in the processes
// table (see Config.ProcessHeartbeat; a failure there is logged, never
// fatal), and, unless Config.PollOnly, checks in the background that
// notifications arrive (a warning says when they do not), and returns.
// ctx bounds only the start-up checks; the Maintainer runs until Stop.
func (m *Maintainer) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.stopping:
		return errors.New("maintenance: Start after Stop: create a new one")
	case m.started:
		return errors.New("maintenance: already started")
	}
	if err := pgbox.CheckSchema(ctx, m.pool, m.cfg.Schema); err != nil {
		return fmt.Errorf("maintenance: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(m.pool), &rivermigrate.Config{Logger: m.cfg.Logger, Schema: m.cfg.Schema})
	if err != nil {
		return fmt.Errorf("maintenance: river: %w", err)
	}
	res, err := migrator.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("maintenance: check River's tables in schema %s: %w", m.cfg.Schema, err)
	}
	if !res.OK {
		return fmt.Errorf("%w: River's tables in schema %s are missing or behind (%s): run inboxctl migrate up (or call migrations.Migrate)",
			pgbox.ErrSchemaNotMigrated, m.cfg.Schema, strings.Join(res.Messages, "; "))
	}
	// River stops when the context given to its Start ends; ours bounds only
	// the checks, so River gets one that Stop alone ends.
	if err := m.client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("maintenance: start River: %w", err)
	}
	m.proc.Start(ctx)
	if !m.cfg.PollOnly {
		m.startProbe()
	}
	m.started = true
	return nil
}

// stopGrace bounds how long Stop waits for jobs after cancelling them.
const stopGrace = 10 * time.Second

// Stop stops working jobs and leaves the leader election (a clean stop
// lets another process take over at once). It waits for the job in
// progress; if ctx ends first, it cancels it, and the job, which works in
// batches, returns after its current statement. Then it removes the
// maintainer's row from the processes table. Stop may be called more than
// once, and before Start.
func (m *Maintainer) Stop(ctx context.Context) error {
	m.mu.Lock()
	started := m.started
	m.stopping = true
	m.mu.Unlock()
	var err error
	m.stopOnce.Do(func() {
		defer close(m.stopped)
		if !started {
			return
		}
		if err = m.client.Stop(ctx); err != nil && ctx.Err() != nil {
			m.cfg.Logger.WarnContext(ctx, "maintenance: stop deadline reached; cancelling the job in progress")
			hardCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopGrace)
			defer cancel()
			err = m.client.StopAndCancel(hardCtx)
		}
		if err != nil {
			err = fmt.Errorf("maintenance: stop: %w", err)
		}
		close(m.probeStop)
		if m.probeDone != nil {
			<-m.probeDone
		}
		m.proc.Stop(ctx)
	})
	<-m.stopped
	return err
}

// Stopped returns a channel closed when Stop has finished.
func (m *Maintainer) Stopped() <-chan struct{} { return m.stopped }

// Running reports whether Start has succeeded and Stop has not begun. A
// health check reads it.
func (m *Maintainer) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.started && !m.stopping
}

// levelFloor passes on only records at min or above: River's info-level
// chatter (client started, leadership changes) stays out of the service's
// logs, and its warnings and errors go in.
type levelFloor struct {
	slog.Handler
	min slog.Level
}

func (h levelFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelFloor) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelFloor{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h levelFloor) WithGroup(name string) slog.Handler {
	return levelFloor{Handler: h.Handler.WithGroup(name), min: h.min}
}
