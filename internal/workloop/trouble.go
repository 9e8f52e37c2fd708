package workloop

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/pgbox/pgbox/internal/notify"
)

// Retry bounds for Record, and how often a trouble that lasts is logged
// again.
const (
	recordWaitMin = 100 * time.Millisecond
	recordWaitMax = 5 * time.Second
	stillFailing  = time.Minute
)

// probed takes the outcome of the listener's self-check. A change is
// logged once: the warning says what is wrong, what it costs and how to
// fix it.
func (s *Service) probed(arrived bool) {
	s.cfg.Telemetry.Arriving(arrived)
	var now error
	if !arrived {
		now = fmt.Errorf("a notification sent on channel %q did not come back to the listener within %s: new work waits for the next poll (up to %s); give the Config a direct ListenConnConfig, or set PollOnly",
			s.cfg.Channel, cmp.Or(s.cfg.ProbeTimeout, notify.ProbeTimeoutDefault), s.cfg.PollInterval)
	}
	// The change is logged before NotifyErr shows it, under the lock, so
	// whoever sees the error finds the log line written too.
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	switch was := s.notifyErr; {
	case !arrived && was == nil:
		s.cfg.Logger.Warn(s.cfg.Name+": notifications do not arrive: the listener's self-check notification never came back, so new work waits for the next poll instead of starting at once. "+
			"A LISTEN through a transaction-pooling PgBouncer behaves so. Fix: set Config.ListenConnConfig to a direct connection to the database, or Config.PollOnly to stop listening. Polling goes on meanwhile",
			slog.String("channel", s.cfg.Channel), slog.Duration("poll_interval", s.cfg.PollInterval))
	case arrived && was != nil:
		s.cfg.Logger.Info(s.cfg.Name+": notifications arrive again", slog.String("channel", s.cfg.Channel))
	}
	s.notifyErr = now
}

// NotifyErr says why notifications do not reach the listener, or returns
// nil: when they do, before the first self-check, and in poll-only mode.
func (s *Service) NotifyErr() error {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	return s.notifyErr
}

// Record runs record, which writes what became of claimed rows, until it
// succeeds: it waits between tries from 100ms doubling to 5s. While any
// worker's record fails, no worker starts a claim (see awaitRecording; a
// claim already under way when the pause begins still completes, and its
// worker then waits on its own outcomes), RecordErr
// says why, and the trouble is logged at error when it starts, every
// minute while it lasts, and at info when it ends. Record gives up, and
// returns the last error, only once Stop's deadline has cancelled the work
// context; what names the outcomes in logs ("publish outcomes").
func (s *Service) Record(what string, record func() error) error {
	err := record()
	if err == nil {
		return nil // the hot path: nothing to lock
	}
	s.recordFailing(what, err, true)
	wait := recordWaitMin
	for {
		select {
		case <-s.workCtx.Done():
			s.recordOver(what, err)
			return err
		case <-time.After(Jitter(wait)):
		}
		wait = min(2*wait, recordWaitMax)
		if err = record(); err == nil {
			s.recordOver(what, nil)
			return nil
		}
		s.recordFailing(what, err, false)
	}
}

// recordFailing notes a failed try; first says it is a recorder's first.
func (s *Service) recordFailing(what string, err error, first bool) {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	s.recErr = err
	now := time.Now()
	if first {
		s.recFailing++
		if s.recFailing > 1 {
			return // already paused, and said so
		}
		s.recSince, s.recLogged = now, now
		s.recResumed = make(chan struct{})
		s.cfg.Telemetry.Paused(true)
		s.cfg.Logger.Error(s.cfg.Name+": cannot record "+what+"; claiming is paused until they are recorded (retrying): check that the database accepts the updates",
			slog.String("error", err.Error()))
		return
	}
	if now.Sub(s.recLogged) >= stillFailing {
		s.recLogged = now
		s.cfg.Logger.Error(s.cfg.Name+": still cannot record "+what+"; claiming is still paused (retrying)",
			slog.Duration("paused_for", now.Sub(s.recSince).Round(time.Second)), slog.String("error", err.Error()))
	}
}

// recordOver ends a recorder's trouble: recorded (err nil), or given up
// because Stop's deadline passed.
func (s *Service) recordOver(what string, err error) {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	if err != nil {
		s.cfg.Logger.Error(s.cfg.Name+": stopped before "+what+" could be recorded; their rows are handled again once their lease expires",
			slog.String("error", err.Error()))
	}
	s.recFailing--
	if s.recFailing > 0 {
		return
	}
	close(s.recResumed)
	s.recResumed, s.recErr = nil, nil
	s.cfg.Telemetry.Paused(false)
	if err == nil {
		s.cfg.Logger.Info(s.cfg.Name+": "+what+" recorded again; claiming resumed",
			slog.Duration("paused_for", time.Since(s.recSince).Round(time.Millisecond)))
	}
}

// RecordErr says why claiming is paused, or returns nil when it is not:
// outcomes could not be recorded, and Record is still retrying them.
func (s *Service) RecordErr() error {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	if s.recFailing == 0 {
		return nil
	}
	return fmt.Errorf("claiming paused for %s: outcomes cannot be recorded: %w",
		time.Since(s.recSince).Round(time.Second), s.recErr)
}

// awaitRecording waits while claiming is paused. It reports false if Stop
// came first.
func (s *Service) awaitRecording() bool {
	s.recMu.Lock()
	resumed := s.recResumed
	s.recMu.Unlock()
	if resumed == nil {
		return true
	}
	select {
	case <-resumed:
		return !s.Stopping()
	case <-s.stopping:
		return false
	}
}
