package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/notify"
)

// errStopped is the cause given to handler contexts cancelled by Stop.
var errStopped = errors.New("dispatcher stopped")

// Dispatcher runs handlers for one consumer's inbox messages with a pool of
// workers. Create it with New, then Start it and Stop it once.
type Dispatcher struct {
	cfg     Config
	pool    *pgxpool.Pool
	q       queries
	channel string

	mu          sync.Mutex
	started     bool
	stopOnce    sync.Once
	stopping    chan struct{} // closed by Stop: claim no more
	stoppedOnce sync.Once
	stopped     chan struct{} // closed when Stop has finished

	workCtx    context.Context // ends when Stop gives up waiting
	cancelWork context.CancelCauseFunc
	workers    sync.WaitGroup
	listener   *notify.Listener
	rescuing   atomic.Bool   // a worker is handling a rescued message
	wake       chan struct{} // a token for one idle worker

	hooks testHooks
}

type queries struct {
	beginBatch, claim, complete, lockClaimed, renewLease string
}

// testHooks let tests stop a worker at the exact moment a race needs.
type testHooks struct {
	afterClaim func(ids []string) // between a claim's commit and its handlers
}

// New returns a Dispatcher for cfg.Consumer. It checks the configuration
// but does not touch the database; Start does.
func New(pool *pgxpool.Pool, cfg Config) (*Dispatcher, error) {
	if pool == nil {
		return nil, errors.New("dispatcher: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Dispatcher{
		cfg:     cfg,
		pool:    pool,
		channel: ident.Channel(cfg.Schema, "inbox"),
		q: queries{
			beginBatch:  fmt.Sprintf("BEGIN; SET LOCAL idle_in_transaction_session_timeout = %d", cfg.Lease.Milliseconds()),
			claim:       ident.Render(claimSQL, cfg.Schema),
			complete:    ident.Render(completeSQL, cfg.Schema),
			lockClaimed: ident.Render(lockClaimedSQL, cfg.Schema),
			renewLease:  ident.Render(renewLeaseSQL, cfg.Schema),
		},
		stopping: make(chan struct{}),
		stopped:  make(chan struct{}),
		wake:     make(chan struct{}, 1),
	}, nil
}

// Start checks that the database is reachable and the schema migrated,
// then starts the workers and the listener that wakes them, and returns.
// ctx bounds only the start-up checks; the dispatcher runs until Stop.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.stopping:
		return errors.New("dispatcher: Start after Stop: create a new Dispatcher")
	default:
	}
	if d.started {
		return errors.New("dispatcher: already started")
	}
	if err := pgbox.CheckSchema(ctx, d.pool, d.cfg.Schema); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}

	d.workCtx, d.cancelWork = context.WithCancelCause(context.Background())
	connConfig := d.pool.Config().ConnConfig.Copy()
	connConfig.RuntimeParams["application_name"] = "pgbox dispatcher listener (" + d.cfg.Consumer + ")"
	d.listener = notify.Start(notify.Config{
		Channel:    d.channel,
		ConnConfig: connConfig,
		Logger:     d.cfg.Logger,
		OnConnect:  d.wakeOne, // work may have been announced while nobody listened
		OnNotify: func(consumer string) {
			if consumer == d.cfg.Consumer {
				d.wakeOne()
			}
		},
	})
	for range d.cfg.Workers {
		d.workers.Go(d.work)
	}
	d.started = true
	return nil
}

// Stop stops claiming messages and waits for the handlers in flight to
// finish. If ctx ends first, it cancels their contexts and waits for them to
// return; the messages they were handling, and any claimed but not started,
// go back to pending at once without spending an attempt, so none is lost.
// Handlers must honour their context for Stop to return promptly.
//
// Stop may be called more than once, and before Start.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() { close(d.stopping) })
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	if started {
		done := make(chan struct{})
		go func() { d.workers.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			d.cfg.Logger.WarnContext(ctx, "dispatcher: stop deadline reached; cancelling handlers in flight",
				slog.String("consumer", d.cfg.Consumer))
			d.cancelWork(errStopped)
			<-done
		}
		d.cancelWork(errStopped)
		d.listener.Close()
	}
	d.stoppedOnce.Do(func() { close(d.stopped) })
	return nil
}

// Stopped returns a channel closed when Stop has finished.
func (d *Dispatcher) Stopped() <-chan struct{} { return d.stopped }

// wakeOne hands a wake-up token to one idle worker. Tokens do not pile up:
// a worker that wakes keeps claiming until it finds nothing, and wakes
// another whenever it claims a full batch.
func (d *Dispatcher) wakeOne() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) isStopping() bool {
	select {
	case <-d.stopping:
		return true
	default:
		return false
	}
}

// work is one worker's loop: claim and handle batches while there is work,
// then wait for a notification or the poll interval.
func (d *Dispatcher) work() {
	errWait := 100 * time.Millisecond
	for !d.isStopping() {
		n, err := d.runBatch()
		if err != nil {
			d.cfg.Logger.Error("dispatcher: claiming failed; retrying",
				slog.String("consumer", d.cfg.Consumer), slog.Duration("wait", errWait), slog.String("error", err.Error()))
			if !d.sleep(errWait) {
				return
			}
			errWait = min(2*errWait, 5*time.Second)
			continue
		}
		errWait = 100 * time.Millisecond
		if n == d.cfg.BatchSize {
			d.wakeOne() // more may be waiting: let an idle worker help
		}
		if n > 0 {
			continue
		}
		select {
		case <-d.stopping:
			return
		case <-d.wake:
		case <-time.After(jitter(d.cfg.PollInterval)):
		}
	}
}

// sleep waits for d, or until Stop; it reports whether to go on.
func (d *Dispatcher) sleep(wait time.Duration) bool {
	select {
	case <-d.stopping:
		return false
	case <-time.After(jitter(wait)):
		return true
	}
}

// jitter spreads waits over ±10% so that workers do not poll in lockstep.
func jitter(d time.Duration) time.Duration {
	spread := d / 10
	if spread <= 0 {
		return d
	}
	return d - spread + rand.N(2*spread)
}
