package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgbox/pgbox/inbox"
)

// MemoryChildEnv, set in a bench process's environment, makes it the memory
// case's drainer (see RunMemoryChild) instead of a bench run.
const MemoryChildEnv = "PGBOX_BENCH_MEMORY_CHILD"

// memorySample is the drainer's report.
type memorySample struct {
	RSSKiB  []int64 `json:"rss_kib"` // one sample per 250 ms
	Seconds float64 `json:"seconds"`
}

// RunMemoryChild drains the bench schema's backlog of n messages with a
// dispatcher of 4 workers, sampling its own resident memory, and writes
// the samples as JSON to stdout. It is the memory case's child process, so
// that nothing else in the process weighs on the figure.
func RunMemoryChild(ctx context.Context, url string, n int64) error {
	pool, _, err := newPool(ctx, url, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	in, err := inbox.New(pool, inbox.Config{Consumer: consumer, Schema: pgboxSchemaName})
	if err != nil {
		return err
	}
	var handled atomic.Int64
	d, err := (&rig{pool: pool, in: in}).dispatcher(&env{log: slog.New(slog.DiscardHandler)}, 4, batchSize, counter(&handled))
	if err != nil {
		return err
	}
	var sample memorySample
	start := time.Now()
	if err := d.Start(ctx); err != nil {
		return err
	}
	for handled.Load() < n {
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
		rss, err := residentKiB()
		if err != nil {
			return err
		}
		sample.RSSKiB = append(sample.RSSKiB, rss)
	}
	sample.Seconds = time.Since(start).Seconds()
	if err := d.Stop(ctx); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(sample)
}

// residentKiB reads this process's resident set size.
func residentKiB() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			var kib int64
			_, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kib)
			return kib, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status")
}

// memory loads a backlog of n and drains it in a child process.
func (e *env) memory(n int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		n := s.n(n)
		r, err := e.newRig(ctx, 8)
		if err != nil {
			return nil, err
		}
		defer r.close()
		if err := r.backlog(ctx, n); err != nil {
			return nil, err
		}
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, self)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", MemoryChildEnv, n), "DATABASE_URL="+e.cfg.URL)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("memory drainer: %w", err)
		}
		var sample memorySample
		if err := json.Unmarshal(out, &sample); err != nil {
			return nil, fmt.Errorf("memory drainer's report: %w", err)
		}
		warm := sample.RSSKiB[len(sample.RSSKiB)/10:]
		if len(warm) == 0 {
			return nil, fmt.Errorf("memory drainer took no samples after its warm-up")
		}
		lo, hi := warm[0], warm[0]
		for _, v := range warm {
			lo, hi = min(lo, v), max(hi, v)
		}
		return Figures{
			"RSS min MiB":  float64(lo) / 1024,
			"RSS max MiB":  float64(hi) / 1024,
			"RSS spread %": 100 * float64(hi-lo) / float64(lo),
			"msgs/s":       float64(n) / sample.Seconds,
		}, nil
	}
}
