// Package notify keeps a LISTEN connection open and reports what arrives on
// it.
//
// Notifications are a latency hint, never the source of truth: a listener
// that is down costs its users a poll interval, not messages. So the
// Listener reconnects with backoff forever, pings an idle connection to
// notice a silently dead one, and after every (re)connect calls OnConnect so
// its user can look for work that may have been announced while nobody
// listened.
package notify

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
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
	// PingInterval is how long the connection may be idle before it is
	// pinged. Zero means 30 seconds.
	PingInterval time.Duration
}

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
	for ctx.Err() == nil {
		err := session(ctx, cfg, func() { backoff = minBackoff })
		if ctx.Err() != nil {
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

// session connects, listens and delivers notifications until the
// connection fails or ctx ends.
func session(ctx context.Context, cfg Config, connected func()) error {
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
	for {
		waitCtx, cancel := context.WithTimeout(ctx, cfg.PingInterval)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			cfg.OnNotify(n.Payload)
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			// Idle: make sure the connection is still alive. A cancelled
			// wait leaves a pgx connection closed, so reconnect instead of
			// pinging when that happened.
			if conn.IsClosed() {
				return errors.New("connection closed after idle wait")
			}
			if err := conn.Ping(ctx); err != nil {
				return err
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
