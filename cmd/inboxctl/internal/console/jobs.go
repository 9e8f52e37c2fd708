package console

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// jobsKept is how many finished background actions a console remembers.
const jobsKept = 100

// job is a bulk action running in the background (a replay, a discard,
// an outbox retry), started from a page and watched on its own.
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
	// Verb names the action: "replay".
	Verb string
	// Selection sums up what it acts on.
	Selection string
	// Started is when it began.
	Started time.Time
	// Target is the target's name.
	Target string
	// User is who started it.
	User string

	mu       sync.Mutex
	err      string
	finished *time.Time
}

// State returns the job's error text ("" if none) and when it finished
// (nil while it runs).
func (j *job) State() (errText string, finished *time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err, j.finished
}

// jobs runs background actions and keeps the recent ones. Their context
// ends with the console, so each stops after its batch under way, its
// audit record saying how far it got.
type jobs struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	byID map[int64]*job
	next int64
}

func newJobs() *jobs {
	ctx, cancel := context.WithCancel(context.Background())
	return &jobs{ctx: ctx, cancel: cancel, byID: map[int64]*job{}}
}

// start runs fn in the background as j, which it numbers, and returns it.
// fn reports its running count through progress.
func (js *jobs) start(j *job, fn func(ctx context.Context, progress func(int64)) (int64, error)) *job {
	js.mu.Lock()
	js.next++
	j.ID, j.Started = js.next, time.Now().UTC()
	js.byID[j.ID] = j
	delete(js.byID, j.ID-jobsKept)
	js.mu.Unlock()

	js.wg.Add(1)
	go func() {
		defer js.wg.Done()
		n, err := fn(js.ctx, j.Done.Store)
		j.Done.Store(n)
		now := time.Now().UTC()
		j.mu.Lock()
		defer j.mu.Unlock()
		if err != nil {
			j.err = err.Error()
		}
		j.finished = &now
	}()
	return j
}

// get returns job id, or nil.
func (js *jobs) get(id int64) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.byID[id]
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

// close cancels every job and waits for them to stop.
func (js *jobs) close() {
	js.cancel()
	js.wg.Wait()
}

// jobView is what the job page shows.
type jobView struct {
	Err      string
	Finished *time.Time
	Job      *job
}

// job shows one background action's progress, refreshing itself while it
// runs.
func (c *Console) job(w http.ResponseWriter, r *http.Request, t *Target) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	j := c.jobs.get(id)
	if err != nil || j == nil || j.Target != t.Name {
		return httpError(http.StatusNotFound, "This console has no background action %q: it keeps the last %d, and forgets them when it restarts. The audit log keeps every one.",
			r.PathValue("id"), jobsKept)
	}
	errText, finished := j.State()
	v := view{Title: "Background " + j.Verb + " " + strconv.FormatInt(j.ID, 10), Nav: "scheduled",
		Data: jobView{Err: c.cfg.Redact(errText), Finished: finished, Job: j}}
	if finished == nil {
		v.Refresh = 1
	}
	return c.render(w, r, t, http.StatusOK, "job", v)
}
