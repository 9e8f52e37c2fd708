// Package notify keeps a LISTEN connection open and reports what arrives on
// it.
//
// Notifications are a latency hint, never the source of truth: a listener
// that is down costs its users a poll interval, not messages. So the
// Listener reconnects with backoff forever, pings an idle connection to
// notice a silently dead one, and after every (re)connect calls OnConnect so
// its user can look for work that may have been announced while nobody
// listened.
//
// A LISTEN that succeeds is no proof that notifications arrive: through a
// transaction-pooling PgBouncer it succeeds and then hears nothing. So the
// Listener can check itself (Config.Probe): it sends a notification the
// way producers do and expects it back.
package notify

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/internal/ident"
)

// Config configures a Listener.
type Config struct {
	// Channel is the channel to LISTEN on (unquoted; it is quoted here).
	Channel string
	// ConnConfig is how to connect. The Listener uses its own connection,
	// outside any pool, for its whole life.
	ConnConfig *pgx.ConnConfig
	// Logger receives connection trouble at warn level.
	Logger *slog.Logger
	// OnConnect is called after every successful LISTEN, including the
	// first.
	OnConnect func()
	// OnNotify is called with the payload of each notification.
	OnNotify func(payload string)
	// OnProbe, if set, is called with the outcome of each self-check:
	// whether the probe notification came back within ProbeTimeout.
	OnProbe func(arrived bool)
	// PingInterval is how long the connection may be idle before it is
	// pinged. Zero means 30 seconds.
	PingInterval time.Duration
	// Probe, if set, sends a notification with the given payload on
	// Channel the way producers do (through their pool). After each
	// successful LISTEN the Listener probes itself with it and expects the
	// notification back within ProbeTimeout: a connection that LISTENs
	// through a transaction-pooling PgBouncer, say, succeeds and then hears
	// nothing. Until a probe comes back on a connection, it is sent again
	// at every idle ping. Nil checks nothing.
	Probe func(ctx context.Context, payload string) error
	// ProbeTimeout is how long a probe may take to come back. Zero means
	// ProbeTimeoutDefault.
	ProbeTimeout time.Duration
	// ProbeTries, if positive, bounds the probes made in a row without one
	// coming back, over every connection. When the last of them fails too,
	// the Listener stops: it logs why, closes its connection and does not
	// reconnect, and its users are left to their polls. Through a
	// transaction-pooling PgBouncer every probe is a notification for a
	// pooled server connection that once ran LISTEN while no client is
	// linked to it, and PgBouncer 1.18 can exit on such a packet
	// (pgbouncer/pgbouncer#822, fixed in 1.20): a Listener that hears
	// nothing must not go on sending them for the life of the process.
	// Zero probes at every idle ping for ever.
	ProbeTries int
}

// ProbeTimeoutDefault is the default Config.ProbeTimeout: a notification
// normally arrives within milliseconds; this leaves room for a loaded
// server.
const ProbeTimeoutDefault = 5 * time.Second

// ProbePrefix starts every probe's payload. Listeners drop notifications
// that start with it, their own and other processes' alike, so a probe
// never wakes a worker.
const ProbePrefix = "pgbox-probe:"

// Listener is a running LISTEN loop. Close stops it.
type Listener struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start begins listening in the background.
func Start(cfg Config) *Listener {
	if cfg.PingInterval == 0 {
		cfg.PingInterval = 30 * time.Second
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = ProbeTimeoutDefault
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		run(ctx, cfg)
	}()
	return l
}

// Close stops the listener and waits for its connection to close. It may
// be called more than once.
func (l *Listener) Close() {
	l.once.Do(l.cancel)
	<-l.done
}

func run(ctx context.Context, cfg Config) {
	const (
		minBackoff = 100 * time.Millisecond
		maxBackoff = 5 * time.Second
	)
	backoff := minBackoff
	var failed int // probes in a row that did not come back
	for ctx.Err() == nil {
		err := session(ctx, cfg, &failed, func() { backoff = minBackoff })
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errGaveUp) {
			cfg.Logger.WarnContext(ctx, "notify: stopped listening: none of the self-check notifications came back, so the listener would only ever hear nothing; polling goes on",
				slog.String("channel", cfg.Channel), slog.Int("tries", cfg.ProbeTries))
			return
		}
		cfg.Logger.WarnContext(ctx, "notify: listener connection lost; reconnecting",
			slog.String("channel", cfg.Channel), slog.Duration("backoff", backoff), slog.String("error", errString(err)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + rand.N(backoff/2)):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// errGaveUp ends a session whose probe was the last of Config.ProbeTries
// to fail.
var errGaveUp = errors.New("no self-check came back")

// session connects, listens and delivers notifications until the
// connection fails, ctx ends, or the probes fail as many times in a row as
// Config.ProbeTries allows (counted in *failed, across sessions).
func session(ctx context.Context, cfg Config, failed *int, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+ident.Quote(cfg.Channel)); err != nil {
		return err
	}
	connected()
	cfg.OnConnect()
	var (
		probe         string    // the payload awaited, if any
		probeDeadline time.Time // when it is overdue
		verified      bool      // a probe came back on this connection
	)
	sendProbe := func() {
		if cfg.Probe == nil || verified {
			return
		}
		payload := ProbePrefix + strconv.FormatUint(rand.Uint64(), 36)
		sendCtx, cancel := context.WithTimeout(ctx, cfg.ProbeTimeout)
		defer cancel()
		if err := cfg.Probe(sendCtx, payload); err != nil {
			if ctx.Err() == nil {
				cfg.Logger.WarnContext(ctx, "notify: could not send the self-check notification; will try again at the next idle ping",
					slog.String("channel", cfg.Channel), slog.String("error", err.Error()))
			}
			return
		}
		probe, probeDeadline = payload, time.Now().Add(cfg.ProbeTimeout)
	}
	sendProbe()
	nextPing := time.Now().Add(cfg.PingInterval)
	for {
		deadline := nextPing
		if probe != "" && probeDeadline.Before(deadline) {
			deadline = probeDeadline
		}
		waitCtx, cancel := context.WithDeadline(ctx, deadline)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			nextPing = time.Now().Add(cfg.PingInterval)
			if !strings.HasPrefix(n.Payload, ProbePrefix) {
				cfg.OnNotify(n.Payload)
			} else if probe != "" && n.Payload == probe {
				probe, verified, *failed = "", true, 0
				if cfg.OnProbe != nil {
					cfg.OnProbe(true)
				}
			}
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			// A cancelled wait leaves a pgx connection closed, so reconnect
			// instead of pinging when that happened.
			if conn.IsClosed() {
				return errors.New("connection closed after idle wait")
			}
			now := time.Now()
			if probe != "" && !now.Before(probeDeadline) {
				probe = ""
				*failed++
				if cfg.OnProbe != nil {
					cfg.OnProbe(false)
				}
				if cfg.ProbeTries > 0 && *failed >= cfg.ProbeTries {
					return errGaveUp
				}
			}
			if now.Before(nextPing) {
				continue
			}
			// Idle: make sure the connection is still alive, and try the
			// self-check again if it has not passed yet.
			if err := conn.Ping(ctx); err != nil {
				return err
			}
			nextPing = now.Add(cfg.PingInterval)
			if probe == "" {
				sendProbe()
			}
		default:
			return err
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
