package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/claimrec"
	"github.com/pgbox/pgbox/internal/frontier"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/liveness"
	"github.com/pgbox/pgbox/internal/telemetry"
	"github.com/pgbox/pgbox/internal/workloop"
)

// ErrStopped is the cause of a handler's context cancellation when Stop's
// deadline passes before the handler returns: context.Cause(ctx) is
// ErrStopped. A handler that sees it should return promptly; its message
// goes back to pending without spending an attempt, whatever it returns.
var ErrStopped = workloop.ErrStopped

// Dispatcher runs handlers for one consumer's inbox messages with a pool of
// workers. Create it with New, then Start it and Stop it once.
type Dispatcher struct {
	cfg         Config
	consumer    string             // cfg.Inbox's
	cuts        cuts               // attempts a database outage cut, given back
	held        claimrec.Held      // batches whose claim record this process will take back
	frontier    *frontier.Frontier // where claims start (TestAClaimStartsAtTheFrontier)
	gauges      telemetry.Registration
	hooks       testHooks
	leasedTypes []string // event types with a Leased handler
	loop        *workloop.Service
	outages     *outages // event types whose handler's dependency is down
	pauses      pauses   // the operators' pauses of the consumer
	pool        *pgxpool.Pool
	proc        *liveness.Process // its row in the processes table; it makes the claim tokens
	q           queries
	// records is a small pool of the dispatcher's own for recording
	// claims: a worker records its claim while its batch transaction holds
	// a connection, and two connections taken from one shared pool could
	// deadlock it when every worker holds one and waits for another.
	records  *pgxpool.Pool
	rescuing atomic.Bool // a worker is handling a rescued message
	schema   string      // cfg.Inbox's
	tel      *telemetry.Dispatcher
}

type queries struct {
	beginBatch, claim, complete, due, pauses, reconcile, recordClaim, renewLease, settle string
	// byKey is the mode of complete, settle and reconcile (see byKeyMode).
	byKey pgx.QueryExecMode
}

// testHooks let tests stop a worker at the exact moment a race needs.
type testHooks struct {
	afterClaim func(ids []string) // between a claim and its handlers
}

// beforeHandlers calls the afterClaim hook, if any, with the messages whose
// handlers are about to run.
func (h testHooks) beforeHandlers(batch []*claimed) {
	if h.afterClaim != nil && len(batch) > 0 {
		h.afterClaim(ids(batch))
	}
}

// New returns a Dispatcher for cfg.Inbox's consumer. pool is the pool its
// workers take their connections from: the Inbox's own, or another on the
// same database. New checks the configuration but does not touch the
// database; Start does.
func New(pool *pgxpool.Pool, cfg Config) (*Dispatcher, error) {
	if pool == nil {
		return nil, errors.New("dispatcher: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	consumer, schema := cfg.Inbox.Consumer(), cfg.Inbox.Schema()
	d := &Dispatcher{
		cfg:      cfg,
		consumer: consumer,
		pool:     pool,
		schema:   schema,
		q: queries{
			beginBatch:  beginBatchSQL(cfg.Lease),
			claim:       strings.Replace(ident.Render(claimSQL, schema), batchPlaceholder, strconv.Itoa(cfg.BatchSize), 1),
			complete:    ident.Render(completeSQL, schema),
			due:         ident.Render(dueSQL, schema),
			pauses:      ident.Render(pausesSQL, schema),
			reconcile:   ident.Render(reconcileSQL, schema),
			recordClaim: ident.Render(recordClaimSQL, schema),
			renewLease:  ident.Render(renewLeaseSQL, schema),
			settle:      ident.Render(settleSQL, schema),
			byKey:       byKeyMode(pool.Config().ConnConfig.DefaultQueryExecMode),
		},
		tel:      telemetry.NewDispatcher(cfg.MeterProvider, cfg.TracerProvider, consumer),
		frontier: frontier.New(frontier.Margin, frontier.FullEvery),
	}
	d.proc = liveness.New(pool, liveness.Config{Consumer: consumer, Heartbeat: cfg.ProcessHeartbeat,
		Kind: pgbox.ProcessDispatcher, Logger: cfg.Logger, Name: cfg.ProcessName, Schema: schema})
	for eventType, h := range cfg.Handlers {
		if h.leased != nil {
			d.leasedTypes = append(d.leasedTypes, eventType)
		}
	}
	d.loop = workloop.New(workloop.Config{
		Batch:      d.runBatch,
		BatchSize:  cfg.BatchSize,
		Channel:    cfg.Inbox.Channel(),
		ConnConfig: cmp.Or(cfg.ListenConnConfig, pool.Config().ConnConfig),
		DueFunc: func(ctx context.Context) (int64, time.Duration, error) {
			whole, skip := d.pauses.paused()
			return telemetry.ReadBacklog(ctx, pool, d.q.due, consumer, workloop.DueCountMax, whole, append(skip, d.outages.down()...))
		},
		Logger:       cfg.Logger.With("consumer", consumer),
		Name:         "dispatcher (" + consumer + ")",
		Notifier:     pool,
		PollInterval: cfg.PollInterval,
		PollOnly:     cfg.PollOnly,
		StallTimeout: max(cfg.StallTimeout, 0),
		Telemetry: telemetry.NewLoop(cfg.MeterProvider,
			telemetry.AttrComponent.String("dispatcher"), telemetry.AttrConsumer.String(consumer)),
		WaitingOnFunc: func() []string {
			var causes []string
			for _, err := range []error{d.PauseErr(), d.UnavailableErr()} {
				if err != nil {
					causes = append(causes, err.Error())
				}
			}
			return causes
		},
		Wanted:  func(c string) bool { return c == consumer },
		Workers: cfg.Workers,
	})
	d.outages = newOutages(cfg, consumer, d.tel, d.loop.Wake)
	return d, nil
}

// Start checks that the database is reachable and the schema migrated,
// registers the dispatcher in the processes table (see
// Config.ProcessHeartbeat; a failure there is logged, never fatal), then
// starts the workers and the listener that wakes them, and returns.
// ctx bounds only the start-up checks; the dispatcher runs until Stop.
func (d *Dispatcher) Start(ctx context.Context) error {
	return d.loop.Start(ctx, func(ctx context.Context) error {
		if err := pgbox.CheckSchema(ctx, d.pool, d.schema); err != nil {
			return fmt.Errorf("dispatcher: %w", err)
		}
		cfg := d.pool.Config() // a copy
		cfg.MaxConns, cfg.MinConns = int32(d.cfg.Workers), 0
		records, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("dispatcher: open the claim-recording pool: %w", err)
		}
		d.records = records
		d.gauges.Watch(func() func() { return d.tel.WatchBacklog(d.pool, d.schema) })
		d.proc.Start(ctx) // last: nothing after it can fail Start
		return nil
	})
}

// Stop stops claiming messages and waits for the handlers in flight to
// finish. If ctx ends first, it cancels their contexts and waits for them to
// return (their contexts' cause is ErrStopped); the messages they were
// handling, and any claimed but not started, go back to pending at once
// without spending an attempt, so none is lost. Then it removes the
// dispatcher's row from the processes table.
// Handlers must honour their context for Stop to return promptly.
//
// Stop may be called more than once, and before Start.
func (d *Dispatcher) Stop(ctx context.Context) error {
	defer d.gauges.Unwatch()
	err := d.loop.Stop(ctx)
	if d.records != nil {
		d.records.Close()
	}
	d.proc.Stop(ctx) // after the work: a stopped dispatcher holds no lease
	return err
}

// Stopped returns a channel closed when Stop has finished.
func (d *Dispatcher) Stopped() <-chan struct{} { return d.loop.Stopped() }
