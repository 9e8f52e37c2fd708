package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/pgbox/pgbox/relay"
)

// twoRelays names the relay-scaling system of two relay processes at once.
const twoRelays = "2 relay processes × 2 workers" // relay.WorkersDefault each

// RelayChildEnv, set in a bench process's environment, makes it one of the
// relay-scaling case's relay processes (see RunRelayChild), publishing to
// the broker it names, instead of a bench run.
const RelayChildEnv = "PGBOX_BENCH_RELAY_CHILD"

// scalingPublisher returns the publisher the relay-scaling case publishes
// to broker through, GoChannel or NATS JetStream at natsURL, and whether
// it takes a call all or none (relay.Config.AtomicPublisher).
func scalingPublisher(broker, natsURL string) (newPublisher, bool, error) {
	switch broker {
	case "GoChannel":
		return goChannel, true, nil
	case "NATS JetStream":
		return natsJetStream(natsURL), false, nil
	}
	return nil, false, fmt.Errorf("no relay-scaling publisher for broker %q", broker)
}

// relayScaling is the relay-scaling case to broker (see scalingPublisher):
// a system per worker count of the chart (Config.SweepWorkers), then two
// relay processes of the default workers.
func (e *env) relayScaling(broker string) (benchCase, error) {
	newPub, atomic, err := scalingPublisher(broker, e.cfg.NATSURL)
	if err != nil {
		return benchCase{}, err
	}
	n := e.cfg.SweepBacklog
	var systems []system
	for _, w := range e.cfg.SweepWorkers {
		systems = append(systems, system{workersName(w), e.relayDrain(n, newPub, relayShape{atomic: atomic, workers: w})})
	}
	systems = append(systems, system{twoRelays, e.relayProcesses(n, broker, 2)})
	return benchCase{scenario: "relay-scaling", setting: fmt.Sprintf("%d rows → %s", n, broker), main: "msgs/s", higherBetter: true, systems: systems}, nil
}

// workersName names the relay-scaling system of w workers.
func workersName(w int) string {
	if w == 1 {
		return "1 worker"
	}
	return strconv.Itoa(w) + " workers"
}

// relayProcesses publishes a pre-written outbox of n rows to broker with
// procs relay processes of relay.Config's defaults (this executable again,
// see RunRelayChild), each with its pool and publisher, and reports rows
// per second from the moment they are told to start, each ready, until
// every row is published.
func (e *env) relayProcesses(n int, broker string, procs int) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		n := s.n(n)
		r, err := e.loadedOutbox(ctx, n, 4)
		if err != nil {
			return nil, err
		}
		defer r.close()
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		var starts []io.WriteCloser
		for range procs {
			cmd := exec.CommandContext(ctx, self)
			cmd.Env = append(os.Environ(), RelayChildEnv+"="+broker, "DATABASE_URL="+e.cfg.URL, "NATS_URL="+e.cfg.NATSURL)
			cmd.Stderr = os.Stderr
			start, err := cmd.StdinPipe()
			if err != nil {
				return nil, err
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				return nil, err
			}
			if err := cmd.Start(); err != nil {
				return nil, fmt.Errorf("relay process: %w", err)
			}
			defer func() { _ = start.Close(); _ = cmd.Wait() }() // closing its stdin stops it
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				return nil, fmt.Errorf("relay process: not ready: %q, %v", line, err)
			}
			starts = append(starts, start)
		}
		began := time.Now()
		for _, start := range starts {
			if _, err := io.WriteString(start, "go\n"); err != nil {
				return nil, fmt.Errorf("relay process: start it: %w", err)
			}
		}
		if err := waitOutboxDone(ctx, r.pool); err != nil {
			return nil, err
		}
		return Figures{"msgs/s": float64(n) / time.Since(began).Seconds()}, nil
	}
}

// RunRelayChild is a relay process of the relay-scaling case: a relay of
// relay.Config's defaults on the bench schema at url, publishing to broker
// (see scalingPublisher). It says "ready" on stdout once made, starts on a
// line from stdin, and stops, and returns, once stdin ends.
func RunRelayChild(ctx context.Context, url, natsURL, broker string) error {
	newPub, atomic, err := scalingPublisher(broker, natsURL)
	if err != nil {
		return err
	}
	pool, _, err := newPool(ctx, url, int32(relay.WorkersDefault+6))
	if err != nil {
		return err
	}
	defer pool.Close()
	pub, closePub, err := newPub(ctx, pool)
	if err != nil {
		return err
	}
	defer closePub()
	rel, err := relay.New(pool, relay.Config{Schema: pgboxSchemaName, Publisher: pub, AtomicPublisher: atomic,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("told %q, %v: expected go", line, err)
	}
	if err := rel.Start(ctx); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until the bench closes stdin
	return rel.Stop(ctx)
}
