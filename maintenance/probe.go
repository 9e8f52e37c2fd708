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

// startProbe checks, in the background, that notifications reach a LISTEN
// made the way River's client makes its own: on a connection configured as
// the pool's. Through a transaction-pooling PgBouncer the LISTEN succeeds
// and then hears nothing, and River, which learns of new jobs and of a
// resigned leader by notification, is left to its polls; nothing but the
// self-check tells. So a listener of internal/notify sends a notification
// through the pool and expects it back within notify.ProbeTimeoutDefault:
// when it does not come, the Maintainer warns once, naming the fix
// (Config.PollOnly); when it comes, the listener has done its work and is
// closed. Until then it tries again at each idle ping, and says so at info
// if notifications arrive after all. Stop ends it.
func (m *Maintainer) startProbe() {
	channel := ident.Channel(m.cfg.Schema, probeChannelKind)
	connConfig := m.pool.Config().ConnConfig.Copy()
	connConfig.RuntimeParams["application_name"] = "pgbox maintenance self-check"
	var (
		mu      sync.Mutex
		warned  bool
		arrived = make(chan struct{})
		once    sync.Once // the listener may report once more before it is closed
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
			switch {
			case !ok && !warned:
				warned = true
				m.cfg.Logger.Warn("maintenance: notifications do not arrive: the self-check notification sent through the pool never came back to a LISTEN made as River's client makes its own, "+
					"so River learns of new maintenance jobs and of a leader that stepped down only by polling, and its listener holds a connection that hears nothing. "+
					"A LISTEN through a transaction-pooling PgBouncer behaves so. Fix: set Config.PollOnly, so that River polls without listening (the jobs are periodic: nothing is lost). Maintenance goes on meanwhile",
					slog.String("channel", channel), slog.String("schema", m.cfg.Schema))
			case ok:
				if warned {
					m.cfg.Logger.Info("maintenance: notifications arrive again", slog.String("channel", channel))
				} else {
					m.cfg.Logger.Debug("maintenance: notifications arrive: the self-check notification came back", slog.String("channel", channel))
				}
				once.Do(func() { close(arrived) }) // its work is done: close it
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
		case <-arrived:
		case <-m.probeStop:
		}
		listener.Close()
	}()
}
