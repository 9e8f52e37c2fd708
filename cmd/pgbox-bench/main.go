// Command pgbox-bench measures pgbox against River and plain SQL on one
// PostgreSQL and writes the report: `make bench` runs it.
//
// Usage:
//
//	pgbox-bench [flags]
//
// The database is DATABASE_URL. NATS_URL, when set, adds the relay case
// through NATS JetStream; PGBOUNCER_URL, a transaction-pooling PgBouncer
// in front of that database, adds the pooler cases. The report goes to
// docs/benchmarks.md, with docs/benchmarks.json for machines and
// docs/benchmarks.png, the throughput chart, and docs/benchmarks-relay.png,
// the relay's.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/pgbox/pgbox/cmd/pgbox-bench/internal/bench"
)

func main() {
	if n := os.Getenv(bench.MemoryChildEnv); n != "" {
		backlog, err := strconv.ParseInt(n, 10, 64)
		if err == nil {
			err = bench.RunMemoryChild(context.Background(), os.Getenv("DATABASE_URL"), backlog)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgbox-bench memory drainer:", err)
			os.Exit(1)
		}
		return
	}
	if broker := os.Getenv(bench.RelayChildEnv); broker != "" {
		if err := bench.RunRelayChild(context.Background(), os.Getenv("DATABASE_URL"), os.Getenv("NATS_URL"), broker); err != nil {
			fmt.Fprintln(os.Stderr, "pgbox-bench relay process:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pgbox-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := bench.Config{URL: os.Getenv("DATABASE_URL"), NATSURL: os.Getenv("NATS_URL"), RabbitMQURL: os.Getenv("RABBITMQ_URL"), RedisURL: os.Getenv("REDIS_URL"),
		SQSURL: os.Getenv("SQS_URL"), PoolerURL: os.Getenv("PGBOUNCER_URL"), Progress: os.Stderr}
	var (
		out    = flag.String("out", "docs/benchmarks", "write the report to this path plus .md, .json and .png")
		only   = flag.String("only", "", "comma-separated scenarios to run (default all); scenario/word runs that scenario's cases whose setting contains word, e.g. pooler/poll-only")
		prof   = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
		render = flag.Bool("render", false, "measure nothing: write the report and chart again from -out's .json")
		update = flag.Bool("update", false, "replace the cases this run measures (see -only) in -out's .json report, and say so in it, instead of writing a report of this run alone")
		kept   = flag.String("retained", "50M,10M", "the retained scenario's inboxes of UUIDv7 ids, by done messages kept (filled once, then reused)")
		random = flag.String("retained-random", "10M", "the retained scenario's inboxes of random ids")
		dated  = flag.String("retained-dated", "50M", "the retained scenario's inboxes of random ids dated by a stable time (inbox.Message.IDTime)")
	)
	flag.IntVar(&cfg.Runs, "runs", 3, "timed runs per case")
	flag.IntVar(&cfg.Backlog, "backlog", 200_000, "messages in the drain cases' backlog")
	flag.IntVar(&cfg.MemoryBacklog, "memory-backlog", 1_000_000, "messages the memory case drains")
	flag.IntVar(&cfg.SweepBacklog, "sweep-backlog", 50_000, "messages each point of the worker chart drains")
	flag.IntVar(&cfg.Rate, "rate", 1000, "messages per second in the latency cases")
	flag.IntVar(&cfg.OperatorRows, "operator-rows", 50_000_000, "done messages in the operator scenario's inbox (filled once, then reused)")
	flag.IntVar(&cfg.OperatorDeadRows, "operator-dead-rows", 1_000_000, "dead messages in the inbox of the operator scenario's failures cases (filled once, then reused)")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of each timed run of the duration cases")
	flag.Parse()
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	var err error
	if cfg.RetainedRows, err = bench.ParseSizes(*kept); err != nil {
		return fmt.Errorf("-retained: %w", err)
	}
	if cfg.RetainedRandomRows, err = bench.ParseSizes(*random); err != nil {
		return fmt.Errorf("-retained-random: %w", err)
	}
	if cfg.RetainedDatedRows, err = bench.ParseSizes(*dated); err != nil {
		return fmt.Errorf("-retained-dated: %w", err)
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *render {
		rep, err := readReport(*out + ".json")
		if err != nil {
			return err
		}
		return write(rep, *out, false)
	}
	var first *bench.Report // the report -update changes, read before measuring
	if *update {
		if first, err = readReport(*out + ".json"); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	loadBefore := bench.ReadLoad()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Load = bench.LoadDuring(loadBefore, bench.ReadLoad())
	rep.Command = "make bench" + strings.TrimPrefix(strings.Join(os.Args, " "), os.Args[0])
	if rep.Machine, err = bench.ReadMachine(ctx, cfg.URL); err != nil {
		return err
	}
	if first != nil {
		first.Update(rep)
		rep = first
	}
	return write(rep, *out, true)
}

func readReport(path string) (*bench.Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the report to render or update: %w", err)
	}
	var rep bench.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("read the report to render or update: %s: %w", path, err)
	}
	return &rep, nil
}

// write writes the report to out plus .md, .png and -relay.png (the
// charts), and .json when withJSON.
func write(rep *bench.Report, out string, withJSON bool) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	md, err := os.Create(out + ".md")
	if err != nil {
		return err
	}
	defer md.Close()
	if err := rep.WriteMarkdown(md, filepath.Base(out)+".png"); err != nil {
		return err
	}
	charts := []struct {
		path  string
		has   bool
		write func(io.Writer) error
	}{
		{out + ".png", len(rep.Sweep) > 0, rep.WriteChart},
		{out + bench.RelayChart + ".png", rep.HasRelayChart(), rep.WriteRelayChart},
	}
	for _, c := range charts {
		if !c.has {
			continue
		}
		png, err := os.Create(c.path)
		if err != nil {
			return err
		}
		defer png.Close()
		if err := c.write(png); err != nil {
			return err
		}
	}
	if !withJSON {
		return nil
	}
	js, err := os.Create(out + ".json")
	if err != nil {
		return err
	}
	defer js.Close()
	return rep.WriteJSON(js)
}
