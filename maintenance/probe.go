package maintenance

import (
	"context"
	"log/slog"
	"sync"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/notify"
)

// probeChannelKind names the channel of the self-check (ident.Channel):
// nobody else listens on it.
const probeChannelKind = "maintenance"

// probeTries is how many self-checks a Maintainer makes at most: the
// first at Start, the others at the listener's idle pings (30 seconds
// apart), until one comes back.
const probeTries = 5

// startProbe checks, in the background, that notifications reach a LISTEN
// made the way River's client makes its own: on a connection configured as
// the pool's. Through a transaction-pooling PgBouncer the LISTEN succeeds
// and then hears nothing, and River, which learns of new jobs and of a
// resigned leader by notification, is left to its polls; nothing but the
// self-check tells. So a listener of internal/notify sends a notification
// through the pool and expects it back within notify.ProbeTimeoutDefault:
// when it does not come, the Maintainer warns once, naming the fix
// (Config.PollOnly), and tries again at the listener's idle pings (a
// loaded server may have been slow), saying so at info if one comes back.
// After probeTries, or the first that comes back, the check is over and
// its listener closed. It does not go on for ever because behind a pooler
// every probe reaches a pooled server connection that once ran LISTEN
// while no client is linked to it, and PgBouncer 1.18 exits on such a
// packet if it is cancelling a query on that connection at the time
// (pgbouncer/pgbouncer#822, fixed in 1.20). Stop ends it too.
func (m *Maintainer) startProbe() {
	channel := ident.Channel(m.cfg.Schema, probeChannelKind)
	connConfig := m.pool.Config().ConnConfig.Copy()
	connConfig.RuntimeParams["application_name"] = "pgbox maintenance self-check"
	var (
		mu      sync.Mutex
		tries   int
		decided = make(chan struct{})
	)
	listener := notify.Start(notify.Config{
		Channel:    channel,
		ConnConfig: connConfig,
		Logger:     m.cfg.Logger,
		OnConnect:  func() {},
		OnNotify:   func(string) {},
		OnProbe: func(ok bool) {
			mu.Lock()
			defer mu.Unlock()
			if tries++; tries > probeTries {
				return // decided already; the listener is being closed
			}
			switch {
			case ok && tries == 1:
				m.cfg.Logger.Debug("maintenance: notifications arrive: the self-check notification came back", slog.String("channel", channel))
			case ok:
				m.cfg.Logger.Info("maintenance: notifications arrive after all: a later self-check notification came back", slog.String("channel", channel))
			case tries == 1:
				m.cfg.Logger.Warn("maintenance: notifications do not arrive: the self-check notification sent through the pool never came back to a LISTEN made as River's client makes its own, "+
					"so River learns of new maintenance jobs and of a leader that stepped down only by polling, and its listener holds a connection that hears nothing. "+
					"A LISTEN through a transaction-pooling PgBouncer behaves so. Fix: set Config.PollOnly, so that River polls without listening (the jobs are periodic: nothing is lost). Maintenance goes on meanwhile",
					slog.String("channel", channel), slog.String("schema", m.cfg.Schema))
			}
			if ok || tries == probeTries {
				tries = probeTries + 1
				close(decided)
			}
		},
		Probe: func(ctx context.Context, payload string) error {
			return notify.Send(ctx, m.pool, channel, payload)
		},
	})
	m.probeDone = make(chan struct{})
	go func() {
		defer close(m.probeDone)
		select {
		case <-decided:
		case <-m.probeStop:
		}
		listener.Close()
	}()
}
