// Package liveness records which processes run pgbox's engines: every
// dispatcher, relay and maintainer registers a row in the schema's
// processes table when it starts, touches it once per heartbeat (one write
// per process per interval, never one per message), and deletes it when it
// stops cleanly. A process that dies leaves its row behind, no longer
// touched: admin.Processes and `inboxctl processes` show it as dead once it
// has missed pgbox.ProcessDeadAfter heartbeats, with the leases its claims
// still hold, and the maintenance job prunes it a day later.
//
// The id the database gives a process also tags its claims: Token makes
// claim tokens with the id in their high 32 bits, so the inbox and outbox
// rows a process holds are found by their claim_token, which every claim
// writes anyway, and linking them to the process costs no column and no
// write.
//
// Registration never stops the engine it describes: a failed registration
// or heartbeat is logged (once when it starts failing, once when it works
// again) and tried again at the next heartbeat, while the engine goes on.
//
// The package is internal because users need none of it directly: they set
// Config.ProcessName and Config.ProcessHeartbeat on the engines, and read the
// table through package admin.
package liveness

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
)

// DB is what a Process needs of a pool: the engine's own.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config describes the process to register. The engines fill it from
// their own Config.
type Config struct {
	// Consumer is a dispatcher's consumer; empty for other kinds.
	Consumer string
	// Heartbeat is how often the row is touched. Zero means
	// pgbox.ProcessHeartbeatDefault.
	Heartbeat time.Duration
	// Kind is what the process runs.
	Kind pgbox.ProcessKind
	// Logger receives registration trouble. Nil means slog.Default().
	Logger *slog.Logger
	// Name is what operators see; empty means host:pid.
	Name string
	// RiverID returns a maintainer's River client id (river_leader's
	// leader_id while it leads); nil for other kinds.
	RiverID func() string
	// Schema holds the processes table.
	Schema string
}

// Process is one registration: its row, its heartbeat, and the claim
// tokens that carry its id.
type Process struct {
	cfg     Config
	db      DB
	host    string
	label   string // prefixes logs: "dispatcher (payments)"
	pid     int
	q       queries
	version string

	id    atomic.Int64  // 0 until registered
	seq   atomic.Uint32 // the low half of the next claim token
	start time.Time     // started_at, by the database clock; the heartbeat goroutine's after Start

	failing  bool // the last registration or heartbeat failed: the heartbeat goroutine's after Start
	mu       sync.Mutex
	started  bool
	stopped  bool
	stop     chan struct{}
	finished chan struct{}
}

type queries struct {
	deregister, heartbeat, register string
}

// New returns a Process that has not registered yet.
func New(db DB, cfg Config) *Process {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = pgbox.ProcessHeartbeatDefault
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	pid := os.Getpid()
	if cfg.Name == "" {
		cfg.Name = host + ":" + strconv.Itoa(pid)
	}
	label := string(cfg.Kind)
	if cfg.Consumer != "" {
		label += " (" + cfg.Consumer + ")"
	}
	p := &Process{
		cfg:   cfg,
		db:    db,
		host:  host,
		label: label,
		pid:   pid,
		q: queries{
			deregister: ident.Render(deregisterSQL, cfg.Schema),
			heartbeat:  ident.Render(heartbeatSQL, cfg.Schema),
			register:   ident.Render(registerSQL, cfg.Schema),
		},
		version:  Version(),
		stop:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	p.seq.Store(rand.Uint32())
	return p
}

// Start registers the process, within ctx, and starts its heartbeat. If
// registering fails it says so and the heartbeat tries again: the engine
// starts all the same. Start may be called once.
func (p *Process) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return
	}
	p.started = true
	p.beat(ctx)
	go p.run()
}

// Stop ends the heartbeat and deletes the process's row: a process that
// stops cleanly is gone, not dead. A failure to delete is logged; the row
// then shows as dead until the maintenance job prunes it. ctx may have
// ended already (a Stop past its deadline): the delete gets a few seconds
// of its own. Stop may be called more than once, and before Start.
func (p *Process) Stop(ctx context.Context) {
	p.mu.Lock()
	started, stopped := p.started, p.stopped
	p.started, p.stopped = true, true // a Start after Stop does nothing
	if !stopped {
		close(p.stop)
	}
	p.mu.Unlock()
	if stopped || !started {
		return
	}
	<-p.finished
	id := p.id.Load()
	if id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if _, err := p.db.Exec(ctx, p.q.deregister, id); err != nil {
		p.cfg.Logger.Warn(p.label+": could not remove this process from the processes table; inboxctl processes shows it as dead until the maintenance job prunes it",
			slog.Int64("process_id", id), slog.String("error", err.Error()))
	}
}

// stopTimeout bounds Stop's delete.
const stopTimeout = 5 * time.Second

// ID returns the id the database gave the process, or 0 while it has not
// registered.
func (p *Process) ID() int64 { return p.id.Load() }

// Token returns a new claim token carrying the process's id in its high 32
// bits and a per-process counter, begun at random, in its low 32 bits:
// tokens of two processes never match, and one process repeats a token only
// after 2³² claims, long after any claim it fenced is over. Before the
// process has registered, tokens are negative and random: no process's.
func (p *Process) Token() int64 {
	id := p.id.Load()
	if id == 0 {
		return -1 - rand.Int64N(math.MaxInt64)
	}
	return id<<32 | int64(p.seq.Add(1))
}

// run touches the row every heartbeat until Stop.
func (p *Process) run() {
	defer close(p.finished)
	ticker := time.NewTicker(p.cfg.Heartbeat)
	defer ticker.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-ticker.C:
			ctx, cancel := context.WithTimeout(context.Background(), max(p.cfg.Heartbeat, time.Second))
			p.beat(ctx)
			cancel()
		}
	}
}

// beat registers the process, or touches its row once it has an id, and
// logs a change between working and failing.
func (p *Process) beat(ctx context.Context) {
	var riverID *string
	if p.cfg.RiverID != nil {
		id := p.cfg.RiverID()
		riverID = &id
	}
	var consumer *string
	if p.cfg.Consumer != "" {
		consumer = &p.cfg.Consumer
	}
	var err error
	if id := p.id.Load(); id == 0 {
		var newID int64
		err = p.db.QueryRow(ctx, p.q.register, string(p.cfg.Kind), consumer, p.cfg.Name, p.host, p.pid, p.version,
			riverID, p.cfg.Heartbeat.Milliseconds()).Scan(&newID, &p.start)
		if err == nil {
			p.id.Store(newID)
		}
	} else {
		_, err = p.db.Exec(ctx, p.q.heartbeat, id, string(p.cfg.Kind), consumer, p.cfg.Name, p.host, p.pid, p.version,
			riverID, p.cfg.Heartbeat.Milliseconds(), p.start)
	}
	switch {
	case err != nil && !p.failing:
		p.failing = true
		p.cfg.Logger.Warn(fmt.Sprintf("%s: cannot record in the processes table that this process is alive; retrying every %s. "+
			"The work goes on, but inboxctl processes shows this process as dead (or missing) until it can",
			p.label, p.cfg.Heartbeat), slog.String("name", p.cfg.Name), slog.String("error", err.Error()))
	case err == nil && p.failing:
		p.failing = false
		p.cfg.Logger.Info(p.label+": recorded in the processes table again", slog.String("name", p.cfg.Name),
			slog.Int64("process_id", p.id.Load()))
	}
}

// Version returns the pgbox module version this binary was built with, as
// Go's build information records it: "v0.4.0", "(devel)" when pgbox is the
// main module built from a checkout, or "unknown" without build information.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	const module = "github.com/pgbox/pgbox"
	if info.Main.Path == module {
		return info.Main.Version
	}
	for _, dep := range info.Deps {
		if dep.Path == module {
			if dep.Replace != nil && dep.Replace.Version != "" {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}
