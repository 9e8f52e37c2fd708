package console

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// jobsKept is how many background actions a console remembers, running
// or finished, for their pages.
const jobsKept = 100

// errConsoleClosed is why a background action stops when the console
// closes: the cause its context is cancelled with.
var errConsoleClosed = errors.New("the console was stopped")

// errCloseTimedOut is why a background action's batch in flight is
// cancelled: the console's Close ran out of time waiting for it.
var errCloseTimedOut = errors.New("the console was stopped and could not wait for the batch under way")

// errJobsClosed is what starting a background action answers once the
// console is closing.
var errJobsClosed = errors.New("the console is stopping: it starts no new action")

// job is a bulk action running in the background (a replay, a discard,
// an outbox retry), started from a page and watched on its own page.
type job struct {
	// Done counts the rows changed so far, as admin's ProgressFunc reports
	// them after each committed batch.
	Done atomic.Int64
	// ID identifies the job in its page's URL.
	ID int64
	// Matched is the dry-run count the operator confirmed.
	Matched int64
	// Next is the page to look at afterwards (the group, the outbox).
	Next string
	// Noun names what it changes: "message", "outbox row".
	Noun string
	// Past says what was done to each row: "replayed".
	Past string
	// Selection sums up what it acts on.
	Selection string
	// Started is when it began.
	Started time.Time
	// Target is the target's name.
	Target string
	// User is who started it.
	User string
	// Verb names the action: "replay".
	Verb string

	// key says what the job does to what (its action and selection), to
	// tell a confirmation posted twice from a new action; "" matches none.
	key string

	mu       sync.Mutex
	err      error
	finished *time.Time
}

// State returns the job's error (nil if none) and when it finished (nil
// while it runs).
func (j *job) State() (err error, finished *time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err, j.finished
}

// jobFunc makes a background action's change under ctx, reporting its
// running count through progress after each committed batch (admin's
// ProgressFunc), and returns how many rows it changed.
type jobFunc func(ctx context.Context, progress func(int64)) (int64, error)

// jobs runs background actions and keeps the recent ones. Closing it
// stops each action between two batches, as inboxctl stops a bulk change
// on Ctrl-C: a batch's statement is never cancelled in flight (whether it
// committed could not be told), unless Close runs out of time.
type jobs struct {
	// ended, if set, is called with each job once it has ended.
	ended func(*job)
	// hard is the parent of every job's context: cancelled only when
	// close runs out of time, to end the batches still in flight.
	hard       context.Context
	cancelHard context.CancelCauseFunc
	// closing is set by close: each job stops after its batch under way.
	closing atomic.Bool
	wg      sync.WaitGroup

	mu   sync.Mutex // guards byID and next, and orders wg.Add before close's wg.Wait
	byID map[int64]*job
	next int64
}

// newJobs returns an empty jobs that calls ended (if not nil) with each
// job once it has ended.
func newJobs(ended func(*job)) *jobs {
	hard, cancel := context.WithCancelCause(context.Background())
	return &jobs{ended: ended, hard: hard, cancelHard: cancel, byID: map[int64]*job{}}
}

// start numbers j, runs fn in the background as j, and returns it with
// started true. When a job with j's key is under way on j's target (the
// same confirmation posted twice: a double click) it starts nothing and
// returns that job. Once jobs is closing it runs nothing and returns
// errJobsClosed.
func (js *jobs) start(j *job, fn jobFunc) (running *job, started bool, err error) {
	js.mu.Lock()
	if js.closing.Load() {
		js.mu.Unlock()
		return nil, false, errJobsClosed
	}
	if twin := js.runningLocked(j.Target, j.key); twin != nil {
		js.mu.Unlock()
		return twin, false, nil
	}
	js.next++
	j.ID, j.Started = js.next, time.Now().UTC()
	js.byID[j.ID] = j
	delete(js.byID, j.ID-jobsKept)
	js.wg.Add(1)
	js.mu.Unlock()

	go func() {
		defer js.wg.Done()
		ctx, stop := context.WithCancelCause(js.hard)
		defer stop(nil)
		n, err := fn(ctx, func(done int64) {
			j.Done.Store(done)
			if js.closing.Load() {
				stop(errConsoleClosed) // the batch just counted has committed: the next one will not start
			}
		})
		j.Done.Store(n)
		if cause := context.Cause(ctx); err != nil && cause != nil {
			err = cause // admin's error is the cancellation's echo: say why
		}
		now := time.Now().UTC()
		j.mu.Lock()
		j.err, j.finished = err, &now
		j.mu.Unlock()
		if js.ended != nil {
			js.ended(j)
		}
	}()
	return j, true, nil
}

// get returns job id, or nil.
func (js *jobs) get(id int64) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.byID[id]
}

// runningLocked returns the job under way on target with key, if any;
// js.mu must be held.
func (js *jobs) runningLocked(target, key string) *job {
	if key == "" {
		return nil
	}
	for _, j := range js.byID {
		if _, finished := j.State(); finished == nil && j.Target == target && j.key == key {
			return j
		}
	}
	return nil
}

// running lists the jobs under way on target, oldest first.
func (js *jobs) running(target string) []*job {
	js.mu.Lock()
	defer js.mu.Unlock()
	var out []*job
	for id := js.next - jobsKept + 1; id <= js.next; id++ {
		if j := js.byID[id]; j != nil && j.Target == target {
			if _, finished := j.State(); finished == nil {
				out = append(out, j)
			}
		}
	}
	return out
}

// close refuses new jobs, asks each running one to stop after its batch
// under way, and waits for them until ctx ends. Then it cancels the
// batches still in flight (each rolls back, and admin still ends its
// audit record), waits for them to return, and reports that it had to.
// It may be called more than once.
func (js *jobs) close(ctx context.Context) error {
	js.mu.Lock()
	js.closing.Store(true)
	js.mu.Unlock()
	stopped := make(chan struct{})
	go func() {
		js.wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
	}
	js.cancelHard(errCloseTimedOut)
	<-stopped
	return fmt.Errorf("console: background actions were still in a batch when the time to stop ran out: that batch was cancelled (%w)", context.Cause(ctx))
}
