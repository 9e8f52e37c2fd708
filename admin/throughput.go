package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

const (
	// ThroughputWindowDefault is the default ThroughputOptions.Window.
	ThroughputWindowDefault = time.Hour
	// ThroughputBucketsDefault is the default ThroughputOptions.Buckets:
	// one a minute over the default window.
	ThroughputBucketsDefault = 60
)

// ThroughputOptions says over which window Throughput counts, and how
// finely.
type ThroughputOptions struct {
	// Buckets splits the window into this many buckets of equal length.
	// Defaults to ThroughputBucketsDefault (60).
	Buckets int

	// Window is how far back from now (database time) done messages are
	// counted. Defaults to ThroughputWindowDefault (1h).
	Window time.Duration
}

// Throughput is how many messages each consumer completed per bucket of
// time over a recent window: what a console draws as a small chart.
type Throughput struct {
	// Bucket is each bucket's length.
	Bucket Duration `json:"bucket_seconds"`
	// Consumers has one entry per consumer that completed a message in the
	// window, by name.
	Consumers []ConsumerThroughput `json:"consumers"`
	// From is when the first bucket starts; the last ends at Until.
	From time.Time `json:"from"`
	// Until is the time of the call (database time).
	Until time.Time `json:"until"`
}

// ConsumerThroughput is one consumer's completed messages per bucket.
type ConsumerThroughput struct {
	// Consumer is the consumer counted.
	Consumer string `json:"consumer"`
	// Counts has one count per bucket, oldest first.
	Counts []int64 `json:"counts"`
	// Total is the sum of Counts.
	Total int64 `json:"total"`
}

// Of returns consumer's counts, or a bucket-long run of zeros when it
// completed nothing in the window.
func (t *Throughput) Of(consumer string) ConsumerThroughput {
	for _, c := range t.Consumers {
		if c.Consumer == consumer {
			return c
		}
	}
	return ConsumerThroughput{Consumer: consumer, Counts: make([]int64, int(t.Until.Sub(t.From)/max(time.Duration(t.Bucket), 1)))}
}

// throughputSQL counts the done messages processed in the last $1
// milliseconds per consumer and per bucket ($2 of them, numbered from 1,
// oldest first). It reads inbox_done_idx (processed_at, WHERE status =
// 'done') from its recent end: the window's rows, never the dedupe memory
// before it, so it costs what the window's throughput costs, like the
// "done in the last hour" count of statsSQL, however many done messages
// the inbox keeps. The bounds use now() (stable within the statement), so
// the planner takes the range from the index. The one row with NULL
// consumer always comes, to carry the window's bounds.
const throughputSQL = `
WITH counted AS (
    SELECT i.consumer,
           least(width_bucket(extract(epoch FROM i.processed_at),
                              extract(epoch FROM now() - $1::bigint * interval '1 millisecond'),
                              extract(epoch FROM now()), $2::int), $2::int) AS bucket,
           count(*) AS n
    FROM /* schema */inbox AS i
    WHERE i.status = ` + tables.InboxDone + `
      AND i.processed_at > now() - $1::bigint * interval '1 millisecond'
    GROUP BY 1, 2
)
SELECT now() - $1::bigint * interval '1 millisecond', now(), NULL::text, 0, 0::bigint
UNION ALL
SELECT NULL, NULL, c.consumer, c.bucket, c.n FROM counted AS c
ORDER BY 3 NULLS FIRST, 4`

// Throughput counts the messages each consumer completed per bucket of
// opts.Window, up to now (database time). It reads only the window's done
// messages, through the done messages' index by completion time, so it
// costs the same on an inbox keeping 50 million done messages as on an
// empty one with the same traffic.
func (a *Admin) Throughput(ctx context.Context, opts ThroughputOptions) (*Throughput, error) {
	switch {
	case opts.Window < 0:
		return nil, fmt.Errorf("admin: ThroughputOptions.Window is %s: use a positive window, or 0 for the default (%s)", opts.Window, ThroughputWindowDefault)
	case opts.Buckets < 0:
		return nil, fmt.Errorf("admin: ThroughputOptions.Buckets is %d: use a positive count, or 0 for the default (%d)", opts.Buckets, ThroughputBucketsDefault)
	}
	window := opts.Window
	if window == 0 {
		window = ThroughputWindowDefault
	}
	buckets := opts.Buckets
	if buckets == 0 {
		buckets = ThroughputBucketsDefault
	}
	rows, err := a.pool.Query(ctx, ident.Render(throughputSQL, a.cfg.Schema), window.Milliseconds(), buckets)
	if err != nil {
		return nil, a.dbError(ctx, "throughput", err)
	}
	defer rows.Close()
	t := &Throughput{Bucket: Duration(window / time.Duration(buckets)), Consumers: []ConsumerThroughput{}}
	for rows.Next() {
		var (
			from, until *time.Time
			consumer    *string
			bucket      int
			n           int64
		)
		if err := rows.Scan(&from, &until, &consumer, &bucket, &n); err != nil {
			return nil, a.dbError(ctx, "throughput", err)
		}
		if consumer == nil {
			t.From, t.Until = from.UTC(), until.UTC()
			continue
		}
		last := len(t.Consumers) - 1
		if last < 0 || t.Consumers[last].Consumer != *consumer {
			t.Consumers = append(t.Consumers, ConsumerThroughput{Consumer: *consumer, Counts: make([]int64, buckets)})
			last++
		}
		c := &t.Consumers[last]
		c.Counts[bucket-1] += n
		c.Total += n
	}
	if err := rows.Err(); err != nil {
		return nil, a.dbError(ctx, "throughput", err)
	}
	return t, nil
}
