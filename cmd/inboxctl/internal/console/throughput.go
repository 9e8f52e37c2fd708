package console

import (
	"context"
	"sync"
	"time"

	"github.com/pgbox/pgbox/admin"
)

const (
	// chartBuckets is how many minutes the overview's throughput chart
	// shows, the current one last.
	chartBuckets = 60
	// recount is how many ended minutes are counted again at each refresh:
	// a message is done as of its transaction's start, so a transaction
	// that commits late can still add to a minute that has just ended.
	recount = 2
)

// throughput keeps one target's completed messages per minute of the last
// hour. A minute that has ended (recount aside) never changes, so each
// overview after the first asks the database only for the last few
// minutes: the overview refreshes every 10 seconds, and the hour's done
// messages, read again each time, would cost what an hour of traffic
// costs, each time.
type throughput struct {
	mu sync.Mutex
	// counts holds each minute's count per consumer, by the minute's start.
	counts map[time.Time]map[string]int64
	// final is the start of the first minute not yet ended when last read.
	final time.Time
}

// chart is what the overview draws: each consumer's completed messages per
// minute of the last hour.
type chart struct {
	counts map[string][]int64 // by consumer: chartBuckets counts each
}

// consumerChart is one consumer's chart.
type consumerChart struct {
	// Counts has one count per minute, oldest first, the current one last.
	Counts []int64
	// Total is the hour's sum.
	Total int64
}

// Of returns consumer's chart: zeros when it completed nothing.
func (c chart) Of(consumer string) consumerChart {
	counts := c.counts[consumer]
	if counts == nil {
		counts = make([]int64, chartBuckets)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	return consumerChart{Counts: counts, Total: total}
}

// read brings the counts up to date from adm and returns the last hour's
// chart.
func (tp *throughput) read(ctx context.Context, adm *admin.Admin) (chart, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var since time.Time // the zero time: the last hour
	if !tp.final.IsZero() {
		// Not further back than the chart, after a long pause.
		since = tp.final.Add(-recount * time.Minute)
		if hour := time.Now().Add(-chartBuckets * time.Minute); since.Before(hour) {
			since = hour
		}
	}
	got, err := adm.Throughput(ctx, admin.ThroughputOptions{Bucket: time.Minute, Since: since})
	if err != nil {
		return chart{}, err
	}
	if tp.counts == nil {
		tp.counts = map[time.Time]map[string]int64{}
	}
	current := got.Until.Truncate(time.Minute)
	first := current.Add(-(chartBuckets - 1) * time.Minute)
	for minute := range tp.counts {
		if !minute.Before(got.From) || minute.Before(first) {
			delete(tp.counts, minute) // counted again now, or out of the chart
		}
	}
	for _, ct := range got.Consumers {
		for i, n := range ct.Counts {
			minute := got.From.Add(time.Duration(i) * time.Minute)
			if n == 0 || minute.Before(first) {
				continue
			}
			if tp.counts[minute] == nil {
				tp.counts[minute] = map[string]int64{}
			}
			tp.counts[minute][ct.Consumer] = n
		}
	}
	tp.final = current
	c := chart{counts: map[string][]int64{}}
	for minute, byConsumer := range tp.counts {
		i := int(minute.Sub(first) / time.Minute)
		for consumer, n := range byConsumer {
			if c.counts[consumer] == nil {
				c.counts[consumer] = make([]int64, chartBuckets)
			}
			c.counts[consumer][i] = n
		}
	}
	return c, nil
}
