package workloop

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// StallTimeoutFor returns the default stall timeout for a loop that polls
// every pollInterval: 30 seconds or 10 poll intervals, whichever is longer.
func StallTimeoutFor(pollInterval time.Duration) time.Duration {
	return max(30*time.Second, 10*pollInterval)
}

const (
	// DueCountMax is as far as Config.DueFunc need count the rows that
	// wait: the watchdog only tells none from some.
	DueCountMax = 1000
	// dueTimeout bounds the watchdog's read of the backlog.
	dueTimeout = 10 * time.Second
)

// watchdog notices a loop that has work and finishes none of it, whatever
// the cause: a broker outage that never ends, a topic whose calls hang,
// outcomes that cannot be recorded, claims that fail or find nothing while
// rows wait, handlers that do not return. Its one signal is Progress, which
// the Batch calls with the rows it finished (an outcome recorded that is
// not a hand-back). Once nothing has been finished for the stall timeout,
// it looks at the database (DueFunc), at each quarter of the timeout: the
// loop is stalled if rows wait and one has been claimable for the timeout,
// or claims have been taking rows for as long without finishing one, or a
// batch has been under way for as long. Then it is logged at error with
// what the loop waits on, StallErr says so, and the stalled gauge is 1,
// until the next row is finished or no row waits. A loop with nothing to
// do is never stalled, and a busy one never looks.
type watchdog struct {
	mu        sync.Mutex
	progress  time.Time         // when a row was last finished (or the loop started)
	claims    int               // claims made since progress
	rows      int               // rows they took
	claimedAt time.Time         // when the first of them that took rows ran; zero if none
	claimErr  error             // since progress, the error of the last claim that failed or took rows; nil if that one succeeded
	busy      map[int]time.Time // when each worker inside a Batch entered it
	stalled   error             // why the loop is stalled; nil if it is not
	since     time.Time         // when it was found stalled
	logged    time.Time         // when that was last logged
}

// Progress tells the loop that n rows were finished: it is not stalled.
func (s *Service) Progress(n int) {
	if n <= 0 {
		return
	}
	w := &s.stall
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.progress, w.claims, w.rows, w.claimedAt, w.claimErr = now, 0, 0, time.Time{}, nil
	if w.stalled != nil {
		s.unstall(now, "rows are finished again")
	}
}

// batchStarted and batchEnded bracket worker i's Batch, so that the
// watchdog can tell what the loop is doing.
func (s *Service) batchStarted(i int) {
	w := &s.stall
	w.mu.Lock()
	w.busy[i] = time.Now()
	w.mu.Unlock()
}

func (s *Service) batchEnded(i, claimed int, err error) {
	w := &s.stall
	w.mu.Lock()
	defer w.mu.Unlock()
	start := w.busy[i]
	delete(w.busy, i)
	if start.Before(w.progress) {
		return // it began before the last progress: it tells nothing now
	}
	w.claims++
	w.rows += claimed
	// A claim that took nothing and did not fail says nothing of the
	// rows waiting (another worker's claim may hold them): it keeps the
	// cause a failed claim gave.
	if err != nil || claimed > 0 {
		w.claimErr = err
	}
	if claimed > 0 && w.claimedAt.IsZero() {
		w.claimedAt = start
	}
}

// StallErr says why the loop is stalled, or returns nil: rows have been
// waiting for the stall timeout and none was finished meanwhile.
func (s *Service) StallErr() error {
	w := &s.stall
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stalled
}

// watch runs the watchdog until Stop: it looks every quarter of the stall
// timeout.
func (s *Service) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-s.stopping; cancel() }() // ends a read of the backlog under way
	ticker := time.NewTicker(max(s.cfg.StallTimeout/4, time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			s.checkStall(ctx, time.Now())
		}
	}
}

// checkStall decides whether the loop is stalled at now.
func (s *Service) checkStall(ctx context.Context, now time.Time) {
	w := &s.stall
	w.mu.Lock()
	idleFor, claimedFor, busyFor := now.Sub(w.progress), time.Duration(0), w.busyFor(now)
	if !w.claimedAt.IsZero() {
		claimedFor = now.Sub(w.claimedAt)
	}
	w.mu.Unlock()
	timeout := s.cfg.StallTimeout
	if idleFor < timeout {
		return // rows were finished lately; Progress clears a stall
	}
	ctx, cancel := context.WithTimeout(ctx, dueTimeout)
	n, age, err := s.cfg.DueFunc(ctx)
	cancel()
	if s.Stopping() {
		return
	}
	rows := fmt.Sprintf("%d rows wait", n)
	if n >= DueCountMax {
		rows = fmt.Sprintf("%d rows or more wait", n)
	}
	var waiting string
	switch {
	case err != nil:
		waiting = fmt.Sprintf("cannot tell whether rows are due: reading the backlog failed: %v", err)
	case n == 0:
	case age >= timeout:
		waiting = fmt.Sprintf("%s, the oldest claimable due for %s", rows, round(age))
	case claimedFor >= timeout:
		waiting = fmt.Sprintf("%s, and claims have taken rows for %s without finishing one", rows, round(claimedFor))
	case busyFor >= timeout:
		waiting = fmt.Sprintf("%s, and a batch has been under way for %s without finishing one", rows, round(busyFor))
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.progress.Before(now) {
		return // progress came while the backlog was read
	}
	if waiting == "" {
		if w.stalled != nil {
			s.unstall(now, "no row waits any more")
		}
		return
	}
	why := s.waitingOn(now)
	w.stalled = fmt.Errorf("no row finished for %s: %s; waiting on: %s", round(now.Sub(w.progress)), waiting, why)
	switch {
	case w.since.IsZero():
		w.since, w.logged = now, now
		s.cfg.Telemetry.Stalled(true)
		s.cfg.Logger.Error(s.cfg.Name+": no progress: work is due and nothing has been finished; see waiting_on",
			slog.Duration("for", round(now.Sub(w.progress))), slog.String("work", waiting), slog.String("waiting_on", why))
	case now.Sub(w.logged) >= stillFailing:
		w.logged = now
		s.cfg.Logger.Error(s.cfg.Name+": no progress still: nothing finished",
			slog.Duration("for", round(now.Sub(w.progress))), slog.String("work", waiting), slog.String("waiting_on", why))
	}
}

// unstall clears a stall; s.stall.mu is held.
func (s *Service) unstall(now time.Time, why string) {
	w := &s.stall
	s.cfg.Logger.Info(s.cfg.Name+": progress again: "+why, slog.Duration("stalled_for", now.Sub(w.since).Round(time.Millisecond)))
	w.stalled, w.since = nil, time.Time{}
	s.cfg.Telemetry.Stalled(false)
}

// waitingOn says what the loop waits on, as far as it and its owner know;
// s.stall.mu is held.
func (s *Service) waitingOn(now time.Time) string {
	w := &s.stall
	var causes []string
	if s.cfg.WaitingOnFunc != nil {
		causes = append(causes, s.cfg.WaitingOnFunc()...)
	}
	if err := s.RecordErr(); err != nil {
		causes = append(causes, err.Error())
	}
	if w.claimErr != nil {
		causes = append(causes, "the last claim failed: "+w.claimErr.Error())
	}
	// A batch under way for a moment is the loop at work, not news.
	if busyFor := w.busyFor(now); busyFor >= s.cfg.StallTimeout/4 {
		causes = append(causes, fmt.Sprintf("%d workers inside a batch (claiming, handling, recording, or waiting their turn), the longest for %s",
			len(w.busy), round(busyFor)))
	}
	claims := fmt.Sprintf("%d claims since the last finished row took %d rows", w.claims, w.rows)
	if len(causes) == 0 {
		claims = "no cause known: " + claims
	}
	return strings.Join(append(causes, claims), "; ")
}

// busyFor returns how long the oldest batch under way has been; w.mu is
// held.
func (w *watchdog) busyFor(now time.Time) time.Duration {
	var longest time.Duration
	for _, start := range w.busy {
		longest = max(longest, now.Sub(start))
	}
	return longest
}

// round rounds d for a person to read: to 10ms below 10s, to the second
// above.
func round(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Second)
}
