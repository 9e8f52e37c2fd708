package console

import (
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox/admin"
)

// overviewView is what the overview shows.
type overviewView struct {
	// Jobs are this console's background actions under way on the target.
	Jobs []*job
	// Pauses are the consumers and event types paused, a whole
	// consumer's before its event types'.
	Pauses []admin.Pause
	// PausedWhole names the consumers paused as a whole; PausedTypes
	// counts each consumer's event types paused.
	PausedWhole map[string]bool
	PausedTypes map[string]int
	// Leader is the maintenance leader's row in the processes table, to
	// name it as inboxctl processes does (name, host, pid); nil when there
	// is no leader, or its River id is in no row (a maintainer of an
	// older pgbox build), which the page then names by that id.
	Leader *admin.Process
	// Processes are the registered processes and the maintenance leader.
	Processes *admin.Processes
	// Scheduled counts the scheduled replays waiting or under way.
	Scheduled int64
	// Stats counts the inbox per consumer and status, and the outbox.
	Stats *admin.Stats
	// Throughput is each consumer's done messages per minute of the hour.
	Throughput chart
	// Dead, Retrying and DeadProcesses sum up what needs a look.
	Dead, Retrying, DeadProcesses int64
}

// overviewRefresh is how often, in seconds, the overview reloads itself.
const overviewRefresh = 10

// overview shows, per consumer, messages by status, the oldest pending
// one's age and the last hour's throughput; the outbox backlog; the
// registered processes and the maintenance leader. Its reads are admin's
// cheap ones (small partial indexes, the minutes of done messages not yet
// counted, the processes table), run at once.
func (c *Console) overview(w http.ResponseWriter, r *http.Request, t *Target) error {
	var v overviewView
	g, ctx := errgroup.WithContext(r.Context())
	g.Go(func() (err error) {
		v.Stats, err = t.Admin.Stats(ctx, admin.StatsOptions{})
		return err
	})
	g.Go(func() (err error) {
		v.Throughput, err = t.throughput.read(ctx, t.Admin)
		return err
	})
	g.Go(func() (err error) {
		v.Processes, err = t.Admin.Processes(ctx)
		return err
	})
	g.Go(func() (err error) {
		v.Scheduled, err = t.Admin.CountScheduledReplays(ctx)
		return err
	})
	g.Go(func() (err error) {
		v.Pauses, err = t.Admin.Pauses(ctx, "")
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	v.PausedWhole, v.PausedTypes = map[string]bool{}, map[string]int{}
	for _, p := range v.Pauses {
		if p.EventType == "" {
			v.PausedWhole[p.Consumer] = true
		} else {
			v.PausedTypes[p.Consumer]++
		}
	}
	for _, cs := range v.Stats.Consumers {
		v.Dead += cs.Dead
		v.Retrying += cs.Retrying
	}
	for i, p := range v.Processes.Processes {
		if p.State == admin.ProcessDead {
			v.DeadProcesses++
		}
		if l := v.Processes.Leader; l != nil && l.ProcessID != 0 && p.ID == l.ProcessID {
			v.Leader = &v.Processes.Processes[i]
		}
	}
	v.Jobs = c.jobs.running(t.Name)
	return c.render(w, r, t, http.StatusOK, "overview", view{Title: "Overview", Data: v, Refresh: overviewRefresh})
}
