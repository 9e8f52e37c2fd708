// Package bench measures pgbox against its peers, River and plain SQL, on
// one PostgreSQL in one run: the engine behind cmd/pgbox-bench and
// `make bench`.
//
// Each case measures every system several times, interleaved (the order
// alternates from run to run), after a warm-up at a tenth of the size, so
// a noisy shared machine affects the systems alike. The report keeps every
// run and compares the first system of a case (pgbox, where it is in the
// case) with each peer run by run, as a ratio.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
)

// Config says what to measure and how hard.
type Config struct {
	// URL is the PostgreSQL to measure on. Required.
	URL string
	// NATSURL, when set, adds the relay case through NATS JetStream.
	NATSURL string
	// RabbitMQURL, when set, adds the relay case through RabbitMQ.
	RabbitMQURL string
	// SQSURL, when set, is an SQS endpoint (goaws: scripts/goaws.sh), and
	// adds the relay case through Amazon SQS's protocol.
	SQSURL string
	// RedisURL, when set, adds the relay case through Redis Streams.
	RedisURL string
	// PoolerURL, when set, adds the pooler scenario: the hot paths
	// measured on URL and through this transaction-pooling PgBouncer in
	// front of the same server, side by side.
	PoolerURL string
	// Runs is how many timed runs each case gets. Defaults to 3.
	Runs int
	// Only, when set, keeps the cases whose scenario it names, and for an
	// entry scenario/word that scenario's cases whose setting contains
	// word ("pooler/poll-only").
	Only []string

	// Backlog is how many messages the drain cases pre-load. Defaults to
	// 200,000.
	Backlog int
	// MemoryBacklog is how many messages the memory case drains. Defaults
	// to 1,000,000.
	MemoryBacklog int
	// Duration is how long each timed case runs. Defaults to 10s.
	Duration time.Duration
	// Workers is the dispatch cases' worker count. Defaults to 4.
	Workers int
	// SweepWorkers are the worker counts of the chart. Defaults to 1, 2, 4, 8.
	SweepWorkers []int
	// SweepBacklog is how many messages each point of the chart drains.
	// Defaults to 50,000.
	SweepBacklog int
	// Rate is the latency cases' steady message rate. Defaults to 1000/s.
	Rate int
	// OperatorRows is how many done messages the operator scenario's inbox
	// holds: the retained scenario's inbox of as many UUIDv7 ids. Defaults
	// to 50,000,000.
	OperatorRows int
	// OperatorDeadRows is how many dead messages the operator scenario's
	// failures cases read: an inbox of its own holding only them. Defaults
	// to 1,000,000.
	OperatorDeadRows int
	// RetainedRows are the retained scenario's inboxes of UUIDv7 ids, by
	// the done messages they keep, largest first; an empty one is measured
	// beside them. Defaults to 50,000,000 and 10,000,000.
	RetainedRows []int
	// RetainedRandomRows are the retained scenario's inboxes of random
	// ids. Defaults to 10,000,000.
	RetainedRandomRows []int
	// RetainedDatedRows are the retained scenario's inboxes of random ids
	// dated by a time fixed with them (inbox.Message.IDTime). Defaults to
	// 50,000,000.
	RetainedDatedRows []int

	// Progress receives a line per measurement. Defaults to io.Discard.
	Progress io.Writer

	// Smoke skips the warm-ups, the latency cases' included: it checks
	// that every case runs, and its figures mean nothing.
	Smoke bool
}

func (c Config) withDefaults() Config {
	c.Runs = cmp.Or(c.Runs, 3)
	c.Backlog = cmp.Or(c.Backlog, 200_000)
	c.MemoryBacklog = cmp.Or(c.MemoryBacklog, 1_000_000)
	c.Duration = cmp.Or(c.Duration, 10*time.Second)
	c.Workers = cmp.Or(c.Workers, 4)
	if len(c.SweepWorkers) == 0 {
		c.SweepWorkers = []int{1, 2, 4, 8}
	}
	c.SweepBacklog = cmp.Or(c.SweepBacklog, 50_000)
	c.Rate = cmp.Or(c.Rate, 1000)
	c.OperatorRows = cmp.Or(c.OperatorRows, 50_000_000)
	c.OperatorDeadRows = cmp.Or(c.OperatorDeadRows, 1_000_000)
	if len(c.RetainedRows) == 0 {
		c.RetainedRows = []int{50_000_000, 10_000_000}
	}
	if len(c.RetainedRandomRows) == 0 {
		c.RetainedRandomRows = []int{10_000_000}
	}
	slices.SortFunc(c.RetainedRows, func(a, b int) int { return b - a })
	if len(c.RetainedDatedRows) == 0 {
		c.RetainedDatedRows = []int{50_000_000}
	}
	slices.SortFunc(c.RetainedRandomRows, func(a, b int) int { return b - a })
	slices.SortFunc(c.RetainedDatedRows, func(a, b int) int { return b - a })
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// scale shrinks a size for a warm-up run.
type scale struct{ warm bool }

func (s scale) n(n int) int {
	if s.warm {
		return max(n/10, 1)
	}
	return n
}

func (s scale) d(d time.Duration) time.Duration {
	if s.warm {
		return max(d/10, 500*time.Millisecond)
	}
	return d
}

// runFunc measures one run of one system, at a scale.
type runFunc = func(ctx context.Context, s scale) (Figures, error)

// system is one contender in a case.
type system struct {
	name string
	run  runFunc
}

// Figures is what one run of one system measured, by unit.
type Figures map[string]float64

// benchCase is one scenario at one setting, measured on each system.
type benchCase struct {
	scenario, setting string
	// main is the unit compared across systems; higherBetter says which
	// way is better.
	main         string
	higherBetter bool
	// once runs the case a single time, without a warm-up: it is long
	// and its figure is about a single run's course.
	once    bool
	systems []system
}

// Run measures every case of cfg and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if cfg.URL == "" {
		return nil, fmt.Errorf("bench: no database URL: set DATABASE_URL, or run `make bench`, which starts a local PostgreSQL")
	}
	e := &env{cfg: cfg, log: slog.New(slog.DiscardHandler), retained: &retainedState{}, operator: &operatorState{}, dead: &deadState{}}
	rep := &Report{Started: time.Now().UTC(), Runs: cfg.Runs}
	cases, err := e.cases()
	if err != nil {
		return nil, err
	}
	for _, c := range cases {
		if !cfg.selects(c) || raceDetector && raceLeftOut.selects(c) {
			continue
		}
		res := Result{Scenario: c.scenario, Setting: c.setting, Unit: c.main, HigherIsBetter: c.higherBetter}
		runs := make(map[string][]Figures)
		for _, s := range c.systems {
			if c.once || cfg.Smoke {
				break
			}
			if _, err := s.run(ctx, scale{warm: true}); err != nil {
				return nil, fmt.Errorf("%s %s, %s warm-up: %w", c.scenario, c.setting, s.name, err)
			}
		}
		n := cfg.Runs
		if c.once {
			n = 1
		}
		for r := range n {
			order := slices.Clone(c.systems)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, s := range order {
				f, err := s.run(ctx, scale{})
				if err != nil {
					return nil, fmt.Errorf("%s %s, %s run %d: %w", c.scenario, c.setting, s.name, r+1, err)
				}
				runs[s.name] = append(runs[s.name], f)
				fmt.Fprintf(cfg.Progress, "%-20s %-14s %-6s run %d: %s\n", c.scenario, c.setting, s.name, r+1, f)
			}
		}
		for _, s := range c.systems {
			res.Systems = append(res.Systems, summarize(s.name, runs[s.name]))
		}
		res.Ratios = ratios(c, runs)
		rep.Results = append(rep.Results, res)
	}
	if len(cfg.Only) == 0 || slices.Contains(cfg.Only, "sweep") {
		for _, w := range cfg.SweepWorkers {
			for _, s := range []system{{"pgbox", e.pgboxDrain(cfg.SweepBacklog, w)}, {"river", e.riverDrain(cfg.SweepBacklog, w*batchSize)}} {
				f, err := s.run(ctx, scale{})
				if err != nil {
					return nil, fmt.Errorf("sweep, %s with %d workers: %w", s.name, w, err)
				}
				fmt.Fprintf(cfg.Progress, "%-20s %-14s %-6s: %s\n", "sweep", fmt.Sprintf("%d workers", w), s.name, f)
				rep.Sweep = append(rep.Sweep, Point{System: s.name, Workers: w, Throughput: f["msgs/s"]})
			}
		}
	}
	rep.Finished = time.Now().UTC()
	return rep, nil
}

// raceLeftOut selects the cases left out under the race detector (go
// test -race), which would fail them for a race in a library rather than
// in pgbox: watermill-nats v2.1.3's subscriber closes a subscription's
// output channel (consumer.go, monitor) while its NATS callback may still
// be sending on it (message_handler.go, which says as much: "can risk
// 'send on closed channel'"), a race make test's -race run met as the NATS
// end-to-end case ended. make test runs these cases without -race
// (TestCasesLeftOutUnderRaceRunAtTinyScale).
var raceLeftOut = Config{Only: []string{"end-to-end/NATS JetStream"}}

// selects reports whether c.Only keeps case bc (all are kept when Only is
// empty).
func (c Config) selects(bc benchCase) bool {
	return len(c.Only) == 0 || slices.ContainsFunc(c.Only, func(only string) bool {
		scenario, word, _ := strings.Cut(only, "/")
		return scenario == bc.scenario && strings.Contains(bc.setting, word)
	})
}

// String lists the figures in a stable order.
func (f Figures) String() string {
	var out string
	for _, k := range slices.Sorted(maps.Keys(f)) {
		out += fmt.Sprintf("%s=%.4g ", k, f[k])
	}
	return out
}
