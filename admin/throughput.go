package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

const (
	// ThroughputBucketDefault is the default ThroughputOptions.Bucket.
	ThroughputBucketDefault = time.Minute
	// ThroughputWindowDefault is how far back Throughput counts when
	// ThroughputOptions.Since is unset.
	ThroughputWindowDefault = time.Hour
)

// ThroughputOptions says from when Throughput counts, and how finely.
type ThroughputOptions struct {
	// Bucket is the length of each bucket counted, at least a second.
	// Buckets are aligned to whole multiples of it since the Unix epoch
	// (whole minutes, by default), so a count of a bucket that has ended
	// never changes, and a caller may keep it and ask only for the
	// buckets after it. Defaults to ThroughputBucketDefault (a minute).
	Bucket time.Duration

	// Since is when counting starts, moved back to the start of its
	// bucket. Defaults to ThroughputWindowDefault (an hour) before now,
	// by the database clock.
	Since time.Time
}

// Throughput is how many messages each consumer completed per bucket of
// time, from From until now: what a console draws as a small chart.
type Throughput struct {
	// Bucket is each bucket's length.
	Bucket Duration `json:"bucket_seconds"`
	// Consumers has one entry per consumer that completed a message since
	// From, by name.
	Consumers []ConsumerThroughput `json:"consumers"`
	// From is when the first bucket starts: a whole multiple of Bucket.
	From time.Time `json:"from"`
	// Until is the time of the call (database time), within the last
	// bucket, which is still filling.
	Until time.Time `json:"until"`
}

// ConsumerThroughput is one consumer's completed messages per bucket.
type ConsumerThroughput struct {
	// Consumer is the consumer counted.
	Consumer string `json:"consumer"`
	// Counts has one count per bucket from From, oldest first, the one
	// holding Until last.
	Counts []int64 `json:"counts"`
}

// throughputSQL counts the done messages processed since $1 (NULL: an
// hour ago), moved back to the start of its bucket, per consumer and per
// bucket of $2 seconds, the buckets aligned to whole multiples of $2 since
// the epoch (date_bin). It reads inbox_done_idx (processed_at, of the done
// rows only) from its recent end: the window's rows, never the
// dedupe memory before it, so it costs what the window's traffic costs
// (like the "done in the last hour" count of statsSQL), however many done
// messages the inbox keeps. The bound is written out, not taken from a
// CTE, so that the planner sees its value and estimates the window's rows
// (a short window then plans as the few rows it is). The one row with NULL
// consumer always comes, to carry the window's bounds.
const throughputSQL = `
WITH counted AS (
    SELECT i.consumer, date_bin($2::int * interval '1 second', i.processed_at, timestamptz 'epoch') AS bucket, count(*) AS n
    FROM /* schema */inbox AS i
    WHERE i.status = ` + tables.InboxDone + `
      AND i.processed_at >= ` + throughputFromSQL + `
    GROUP BY 1, 2
)
SELECT ` + throughputFromSQL + `, now(), NULL::text, NULL::timestamptz, 0::bigint
UNION ALL
SELECT NULL, NULL, c.consumer, c.bucket, c.n FROM counted AS c
ORDER BY 3 NULLS FIRST, 4`

// throughputFromSQL is where throughputSQL's first bucket starts.
const throughputFromSQL = `date_bin($2::int * interval '1 second', coalesce($1::timestamptz, now() - interval '1 hour'), timestamptz 'epoch')`

// Throughput counts the messages each consumer completed per bucket, from
// opts.Since until now (database time). It reads only those done
// messages, through the done messages' index by completion time, so it
// costs the same on an inbox keeping 50 million done messages as on an
// empty one with the same traffic; a caller that keeps the counts of the
// buckets that have ended pays only for the new ones.
func (a *Admin) Throughput(ctx context.Context, opts ThroughputOptions) (*Throughput, error) {
	bucket := opts.Bucket
	if bucket == 0 {
		bucket = ThroughputBucketDefault
	}
	if bucket < time.Second || bucket%time.Second != 0 {
		return nil, fmt.Errorf("admin: ThroughputOptions.Bucket is %s: use whole seconds, at least one, or 0 for the default (%s)", bucket, ThroughputBucketDefault)
	}
	var since any
	if !opts.Since.IsZero() {
		since = opts.Since
	}
	rows, err := a.pool.Query(ctx, ident.Render(throughputSQL, a.cfg.Schema), since, int(bucket/time.Second))
	if err != nil {
		return nil, a.dbError(ctx, "throughput", err)
	}
	defer rows.Close()
	t := &Throughput{Bucket: Duration(bucket), Consumers: []ConsumerThroughput{}}
	for rows.Next() {
		var (
			from, until, at *time.Time
			consumer        *string
			n               int64
		)
		if err := rows.Scan(&from, &until, &consumer, &at, &n); err != nil {
			return nil, a.dbError(ctx, "throughput", err)
		}
		if consumer == nil {
			t.From, t.Until = from.UTC(), until.UTC()
			continue
		}
		last := len(t.Consumers) - 1
		if last < 0 || t.Consumers[last].Consumer != *consumer {
			t.Consumers = append(t.Consumers, ConsumerThroughput{Consumer: *consumer, Counts: make([]int64, t.buckets())})
			last++
		}
		// A message processed "after now" (by a clock ahead of the
		// database's) is left out.
		if b := int(at.Sub(t.From) / bucket); b >= 0 && b < len(t.Consumers[last].Counts) {
			t.Consumers[last].Counts[b] += n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, a.dbError(ctx, "throughput", err)
	}
	return t, nil
}

// buckets is how many buckets span From to Until, the last still filling.
func (t *Throughput) buckets() int {
	return int(t.Until.Sub(t.From)/time.Duration(t.Bucket)) + 1
}
