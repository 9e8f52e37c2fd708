// Package workloop runs the loop the dispatcher and the relay share: a pool
// of workers that claim and handle batches of rows, woken at once by
// LISTEN/NOTIFY and by polling as the fallback, with a stop that drains the
// work in flight and, at its deadline, cancels it.
//
// Three kinds of trouble are watched for and reported (logs, NotifyErr,
// RecordErr and StallErr for the health check, gauges):
//   - notifications that never arrive (a LISTEN through a transaction
//     pooler): the listener checks itself, and the loop goes on polling;
//   - outcomes that cannot be recorded: Record retries them, and no worker
//     claims anything until they are recorded, so that rows are not handled
//     again and again while their results go nowhere;
//   - a loop that has work and finishes none of it, whatever the cause: a
//     watchdog (watchdog.go) says so once the stall timeout has passed,
//     with what the loop waits on.
//
// A Service has the life cycle of River's clients: Start does not block and
// fails fast if its preflight check (a schema check) fails; Stop may be
// called more than once and before Start; Stopped tells when it is over.
package workloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/internal/notify"
	"github.com/pgbox/pgbox/internal/pooled"
	"github.com/pgbox/pgbox/internal/telemetry"
)

// ErrStopped is the cause of the work context's cancellation when Stop's
// deadline passes.
var ErrStopped = errors.New("stopped")

// Config configures a Service.
type Config struct {
	// Batch claims and handles one batch. It returns how many rows it
	// claimed; an error means the claim itself failed and the worker backs
	// off. Batch must return promptly once the work context is cancelled.
	Batch func() (claimed int, err error)
	// BatchSize is the most rows Batch claims: a full batch makes the worker
	// wake another and go on at once.
	BatchSize int
	// Channel is the LISTEN/NOTIFY channel that announces new rows.
	Channel string
	// ConnConfig is how the listener connects (its own connection).
	ConnConfig *pgx.ConnConfig
	// DueFunc reads the backlog for the watchdog: how many rows wait to be
	// finished (due, backing off, or claimed), counted up to DueCountMax,
	// and how long the oldest that a claim could take now has been due.
	// Nil, or a StallTimeout of 0, runs no watchdog.
	DueFunc func(ctx context.Context) (n int64, oldestDue time.Duration, err error)
	// Notifier sends the listener's self-check notification, the way
	// producers send theirs: the service's pool.
	Notifier notify.Execer
	// Logger receives the loop's own trouble.
	Logger *slog.Logger
	// Name prefixes errors and logs, and names the listener's connection in
	// pg_stat_activity: "dispatcher (payments)", "relay".
	Name string
	// PollInterval is how often an idle worker looks for work unprompted.
	PollInterval time.Duration
	// PollOnly opens no listener: workers wake on the poll interval alone.
	PollOnly bool
	// ProbeTimeout is how long the listener's self-check notification may
	// take to come back. Zero means notify.ProbeTimeoutDefault.
	ProbeTimeout time.Duration
	// StallTimeout is how long rows may wait with none finished before the
	// watchdog reports the loop stalled (see watchdog); 0 runs none.
	StallTimeout time.Duration
	// Telemetry records the loop's gauges.
	Telemetry *telemetry.Loop
	// WaitingOnFunc names what the owner knows the loop waits on (a broker
	// outage, a topic that hangs), for the watchdog's report; nil if
	// nothing.
	WaitingOnFunc func() []string
	// Wanted reports whether a notification's payload concerns this
	// service; nil means every notification does.
	Wanted func(payload string) bool
	// Workers is how many workers run Batch.
	Workers int
}

// Service is a running (or not yet started) loop.
type Service struct {
	cfg Config

	mu          sync.Mutex
	started     bool
	stopOnce    sync.Once
	stopping    chan struct{} // closed by Stop: claim no more
	stoppedOnce sync.Once
	stopped     chan struct{} // closed when Stop has finished

	workCtx    context.Context // cancelled when Stop gives up waiting
	cancelWork context.CancelCauseFunc
	workers    sync.WaitGroup
	listener   *notify.Listener
	wake       chan struct{} // a token for one idle worker

	notifyMu  sync.Mutex
	notifyErr error // why notifications do not arrive; nil if they do or unknown

	recMu      sync.Mutex
	recFailing int           // recorders whose outcomes could not be recorded yet
	recErr     error         // the last recording error while recFailing > 0
	recSince   time.Time     // when recFailing last left 0
	recLogged  time.Time     // when the trouble was last logged
	recResumed chan struct{} // closed when recFailing drops to 0; nil while 0

	stall     watchdog
	watchDone sync.WaitGroup
}

// listenProbeTries is how many self-checks in a row the listener makes
// without one coming back before it stops listening for good: 5 spans two
// minutes of idle pings, long enough for a slow server to answer one, and
// it keeps a listener behind a transaction pooler from sending probes for
// the life of the process (see notify.Config.ProbeTries).
const listenProbeTries = 5

// New returns a Service that has not started.
func New(cfg Config) *Service {
	workCtx, cancel := context.WithCancelCause(context.Background())
	return &Service{
		cfg:        cfg,
		stall:      watchdog{busy: map[int]time.Time{}},
		stopping:   make(chan struct{}),
		stopped:    make(chan struct{}),
		wake:       make(chan struct{}, 1),
		workCtx:    workCtx,
		cancelWork: cancel,
	}
}

// Start runs preflight (a schema check, say), then starts the workers and
// the listener and returns. ctx bounds only preflight.
func (s *Service) Start(ctx context.Context, preflight func(context.Context) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Stopping() {
		return fmt.Errorf("%s: Start after Stop: create a new one", s.cfg.Name)
	}
	if s.started {
		return fmt.Errorf("%s: already started", s.cfg.Name)
	}
	if err := preflight(ctx); err != nil {
		return err
	}
	if !s.cfg.PollOnly {
		connConfig := s.cfg.ConnConfig.Copy()
		connConfig.RuntimeParams["application_name"] = "pgbox " + s.cfg.Name + " listener"
		s.listener = notify.Start(notify.Config{
			Channel:    s.cfg.Channel,
			ConnConfig: connConfig,
			Logger:     s.cfg.Logger,
			OnConnect:  s.Wake, // work may have been announced while nobody listened
			OnNotify: func(payload string) {
				if s.cfg.Wanted == nil || s.cfg.Wanted(payload) {
					s.Wake()
				}
			},
			OnProbe: s.probed,
			Probe: func(ctx context.Context, payload string) error {
				return notify.Send(ctx, s.cfg.Notifier, s.cfg.Channel, payload)
			},
			ProbeTimeout: s.cfg.ProbeTimeout,
			ProbeTries:   listenProbeTries,
		})
	}
	s.stall.mu.Lock()
	s.stall.progress = time.Now() // a loop is not stalled before it has run
	s.stall.mu.Unlock()
	for i := range s.cfg.Workers {
		s.workers.Go(func() { s.work(i) })
	}
	if s.cfg.StallTimeout > 0 && s.cfg.DueFunc != nil {
		s.watchDone.Go(s.watch)
	}
	s.started = true
	return nil
}

// Stop stops claiming and waits for the batches in flight. If ctx ends
// first, it cancels the work context (cause ErrStopped) and waits for the
// batches to wind down. It may be called more than once, and before Start.
func (s *Service) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		done := make(chan struct{})
		go func() { s.workers.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.cfg.Logger.WarnContext(ctx, s.cfg.Name+": stop deadline reached; cancelling the work in flight")
			s.cancelWork(ErrStopped)
			<-done
		}
		if s.listener != nil {
			s.listener.Close()
		}
		s.watchDone.Wait()
	}
	s.cancelWork(ErrStopped)
	s.stoppedOnce.Do(func() { close(s.stopped) })
	return nil
}

// Stopped returns a channel closed when Stop has finished.
func (s *Service) Stopped() <-chan struct{} { return s.stopped }

// Running reports whether Start has succeeded and Stop has not begun.
func (s *Service) Running() bool {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	return started && !s.Stopping()
}

// Stopping reports whether Stop has begun: claim nothing more.
func (s *Service) Stopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// StopSignal returns a channel closed when Stop begins: for a Batch that
// waits before claiming, to stop waiting.
func (s *Service) StopSignal() <-chan struct{} { return s.stopping }

// WorkContext is the context work runs under: cancelled, with cause
// ErrStopped, when Stop's deadline passes.
func (s *Service) WorkContext() context.Context { return s.workCtx }

// CancelledByStop reports whether Stop cancelled the work context.
func (s *Service) CancelledByStop() bool {
	return errors.Is(context.Cause(s.workCtx), ErrStopped)
}

// Wake hands a wake-up token to one idle worker. Tokens do not pile up: a
// worker that wakes keeps claiming until it finds nothing, and wakes
// another whenever it claims a full batch.
func (s *Service) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// work is worker i's loop: claim and handle batches while there is work,
// then wait for a notification or the poll interval.
func (s *Service) work(i int) {
	const minErrWait, maxErrWait = 100 * time.Millisecond, 5 * time.Second
	errWait := minErrWait
	for !s.Stopping() {
		if !s.awaitRecording() {
			return
		}
		s.batchStarted(i)
		n, err := s.cfg.Batch()
		s.batchEnded(i, n, err)
		if err != nil {
			s.cfg.Logger.Error(s.cfg.Name+": claiming failed; retrying",
				slog.Duration("wait", errWait), slog.String("error", pooled.Explain(err).Error()))
			if !s.sleep(errWait) {
				return
			}
			errWait = min(2*errWait, maxErrWait)
			continue
		}
		errWait = minErrWait
		if n >= s.cfg.BatchSize {
			s.Wake() // more may be waiting: let an idle worker help
		}
		if n > 0 {
			continue
		}
		select {
		case <-s.stopping:
			return
		case <-s.wake:
		case <-time.After(Jitter(s.cfg.PollInterval)):
		}
	}
}

// sleep waits for d, or until Stop; it reports whether to go on.
func (s *Service) sleep(d time.Duration) bool {
	select {
	case <-s.stopping:
		return false
	case <-time.After(Jitter(d)):
		return true
	}
}

// Jitter spreads a wait over ±10% so that workers do not act in lockstep.
func Jitter(d time.Duration) time.Duration {
	spread := d / 10
	if spread <= 0 {
		return d
	}
	return d - spread + rand.N(2*spread)
}
