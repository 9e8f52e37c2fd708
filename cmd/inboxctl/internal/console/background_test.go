package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// batchedJob is a background action the test steps through: each batch
// waits for the test to release it, sees the job's context as the batch
// has it, and commits one row.
type batchedJob struct {
	inBatch chan context.Context // a batch has started, under this context
	release chan struct{}        // the batch may commit
}

func newBatchedJob() *batchedJob {
	return &batchedJob{inBatch: make(chan context.Context), release: make(chan struct{})}
}

// run is the jobFunc: batches until its context ends, as admin's
// inBatches does (each batch's statement runs under ctx).
func (bj *batchedJob) run(ctx context.Context, progress func(int64)) (int64, error) {
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		select {
		case bj.inBatch <- ctx:
		case <-ctx.Done():
			return n, ctx.Err()
		}
		select {
		case <-bj.release:
		case <-ctx.Done():
			return n, ctx.Err() // cancelled in flight: rolled back
		}
		n++
		progress(n)
	}
}

// Closing lets the batch under way commit, then stops the action before
// its next batch; the action says why it stopped, and a new one is
// refused.
func TestCloseStopsBackgroundActionsBetweenBatches(t *testing.T) {
	t.Parallel()
	ended := make(chan *job, 1)
	js := newJobs(func(j *job) { ended <- j })
	bj := newBatchedJob()
	j, started, err := js.start(&job{Verb: "replay"}, bj.run)
	require.NoError(t, err)
	require.True(t, started)
	<-bj.inBatch
	bj.release <- struct{}{}
	batch := <-bj.inBatch // the second batch is under way

	closed := make(chan error, 1)
	go func() { closed <- js.close(context.Background()) }()
	require.Eventually(t, js.closing.Load, 10*time.Second, time.Millisecond)
	_, _, err = js.start(&job{}, bj.run)
	require.ErrorIs(t, err, errJobsClosed, "a closing console starts nothing")
	require.NoError(t, batch.Err(), "the batch under way is not cancelled in flight")
	bj.release <- struct{}{}

	require.NoError(t, <-closed)
	require.Same(t, j, <-ended)
	err, finished := j.State()
	require.ErrorIs(t, err, errConsoleClosed)
	require.NotNil(t, finished)
	require.EqualValues(t, 2, j.Done.Load(), "both batches that committed are counted")
	require.NoError(t, js.close(context.Background()), "closing again is harmless")
}

// A batch that outlasts Close's time is cancelled in flight, Close waits
// for it to return all the same (no goroutine outlives it), and says so.
func TestCloseCancelsABatchThatOutlastsIt(t *testing.T) {
	t.Parallel()
	js := newJobs(nil)
	bj := newBatchedJob()
	j, _, err := js.start(&job{Verb: "replay"}, bj.run)
	require.NoError(t, err)
	batch := <-bj.inBatch

	err = js.close(canceled())
	require.ErrorContains(t, err, "still in a batch")
	require.ErrorIs(t, context.Cause(batch), errCloseTimedOut)
	err, finished := j.State()
	require.NotNil(t, finished, "the action has returned by the time close does")
	require.ErrorIs(t, err, errCloseTimedOut)
	require.Zero(t, j.Done.Load())
}

// A background action that fails says so in the log, whoever closed its
// page, with its error redacted; one that finishes says so too. Once the
// console is closed, an action is refused with a 503 and changes nothing.
func TestBackgroundActionsReportHowTheyEnded(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Redact: func(s string) string { return redactPassword.Replace(s) }})
	failed, _, err := b.console.jobs.start(&job{Verb: "replay", Target: "test", User: "console"},
		func(context.Context, func(int64)) (int64, error) {
			return 0, errors.New("connect postgres://ops:hunter2@db/orders: refused")
		})
	require.NoError(t, err)
	b.waitLog(t, `msg="console: replay failed"`)
	_, finished := failed.State()
	require.NotNil(t, finished)
	require.Contains(t, b.logs.String(), "postgres://ops:xxxxx@db/orders")
	require.NotContains(t, b.logs.String(), "hunter2")
	status, body := b.get(t, "/jobs/1")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "refused")
	require.NotContains(t, body, "hunter2", "the job's page redacts its error too")

	resp, body := b.post(t, "/replay", url.Values{"scope": {"all"}, "consumer": {"payments"}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	b.waitAudit(t, "replay")
	b.waitLog(t, `msg="console: replay finished"`)

	require.NoError(t, b.console.Close(context.Background()))
	resp, body = b.post(t, "/replay", url.Values{"scope": {"all"}, "consumer": {"shipping"}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Contains(t, body, "the console is stopping")
	require.Equal(t, 1, b.count(t, "consumer = 'shipping' AND status = 'dead'"), "nothing was replayed")
}

// The same action on the same selection, confirmed twice while the first
// runs (a double click), runs once; another selection, or the same one
// once the first has ended, runs again.
func TestSameActionUnderWayIsNotStartedTwice(t *testing.T) {
	t.Parallel()
	js := newJobs(nil)
	bj := newBatchedJob()
	first, started, err := js.start(&job{Target: "db", key: "replay group 1"}, bj.run)
	require.NoError(t, err)
	require.True(t, started)
	<-bj.inBatch

	twin, started, err := js.start(&job{Target: "db", key: "replay group 1"}, bj.run)
	require.NoError(t, err)
	require.False(t, started, "the second confirmation starts nothing")
	require.Same(t, first, twin, "and is sent to the first's page")
	other := newBatchedJob()
	_, started, err = js.start(&job{Target: "db", key: "replay group 2"}, other.run)
	require.NoError(t, err)
	require.True(t, started, "another selection is another action")
	<-other.inBatch
	_, started, err = js.start(&job{Target: "elsewhere", key: "replay group 1"}, other.run)
	require.NoError(t, err)
	require.True(t, started, "the same selection on another target is another action")
	<-other.inBatch

	require.Error(t, js.close(canceled()), "the tests' batches are cancelled in flight")
	_, finished := first.State()
	require.NotNil(t, finished)
}

// canceled is a context that has ended.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
