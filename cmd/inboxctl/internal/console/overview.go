package console

import (
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox/admin"
)

// overviewView is what the overview shows.
type overviewView struct {
	Jobs       []*job
	Processes  *admin.Processes
	Scheduled  int64
	Stats      *admin.Stats
	Throughput chart
	// Dead, Retrying and DeadProcesses sum up what needs a look.
	Dead, Retrying, DeadProcesses int64
}

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
	if err := g.Wait(); err != nil {
		return err
	}
	for _, cs := range v.Stats.Consumers {
		v.Dead += cs.Dead
		v.Retrying += cs.Retrying
	}
	for _, p := range v.Processes.Processes {
		if p.State == admin.ProcessDead {
			v.DeadProcesses++
		}
	}
	v.Jobs = c.jobs.running(t.Name)
	view := view{Title: "Overview", Data: v, Refresh: 10}
	return c.render(w, r, t, http.StatusOK, "overview", view)
}
