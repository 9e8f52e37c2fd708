package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// readyTimeout bounds how long a service may take to migrate its schema and
// start.
const readyTimeout = 60 * time.Second

// proc is a service running as a child process.
type proc struct {
	args  []string
	cmd   *exec.Cmd
	done  chan struct{} // closed once the process has exited and its output is drained
	err   error         // its exit status, once done
	log   *os.File
	name  string
	stdin io.WriteCloser // closing it tells the child to shut down (-exit-on-stdin-eof)
	url   string         // its HTTP base URL, from its "ready" line
}

// start starts a service process and waits until it says it is ready. Its
// stderr, and its stdout after the ready line, go to <logDir>/<name>.log.
func (r *run) start(ctx context.Context, name string, args ...string) (*proc, error) {
	logFile, err := os.OpenFile(filepath.Join(r.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// A new slice: callers share argument lists between processes.
	args = append(slices.Clip(args), "-name", name, "-exit-on-stdin-eof")
	p := &proc{args: args, cmd: r.cfg.Command(args...), done: make(chan struct{}), log: logFile, name: name}
	p.cmd.Stderr = logFile
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		logFile.Close()
		return nil, err
	}
	fmt.Fprintf(logFile, "--- %s: %s %s\n", time.Now().Format(time.RFC3339Nano), name, strings.Join(args, " "))
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		said := false
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "ready "); ok && !said {
				said = true
				ready <- url
				continue
			}
			fmt.Fprintln(logFile, sc.Text())
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case p.url = <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before it was ready (%v): %s", name, p.err, p.logTail())
	case <-timer.C:
		p.kill()
		return nil, fmt.Errorf("%s was not ready after %s: %s", name, readyTimeout, p.logTail())
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

// spec names a process to start and its arguments.
type spec struct {
	name string
	args []string
}

// startAll starts processes at once and waits until all are ready.
func (r *run) startAll(ctx context.Context, specs ...spec) ([]*proc, error) {
	procs := make([]*proc, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() { procs[i], errs[i] = r.start(ctx, s.name, s.args...) })
	}
	wg.Wait()
	return procs, errors.Join(errs...)
}

// restart starts a new process with the same name and arguments.
func (r *run) restart(ctx context.Context, p *proc) (*proc, error) {
	args := p.args[:len(p.args)-3] // without the "-name", name, "-exit-on-stdin-eof" start adds
	return r.start(ctx, p.name, args...)
}

// pid returns the process's id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// kill sends SIGKILL, which no process can catch or delay, and waits for
// it to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.log.Close()
}

// stop asks the process to shut down gracefully (SIGTERM), waits up to
// timeout, then kills it. It reports an unclean exit.
func (p *proc) stop(timeout time.Duration) error {
	select {
	case <-p.done:
		p.log.Close()
		return nil // killed earlier
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		p.log.Close()
		var exit *exec.ExitError
		if errors.As(p.err, &exit) {
			return fmt.Errorf("%s exited with %v: %s", p.name, p.err, p.logTail())
		}
		return nil
	case <-timer.C:
		p.kill()
		return fmt.Errorf("%s did not stop within %s and was killed: %s", p.name, timeout, p.logTail())
	}
}

// logTailLines is how many of its last log lines a failed process's error
// carries: enough for the error it ended with, and what led to it.
const logTailLines = 40

// logTail names p's log and quotes its last lines, for an error about p.
// The log alone would not do: a run's log folder may not outlive it (a
// test's temporary folder), and a failure seen only in CI would lose why.
func (p *proc) logTail() string {
	data, err := os.ReadFile(p.log.Name())
	if err != nil {
		return fmt.Sprintf("its log %s cannot be read: %v", p.log.Name(), err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(len(lines)-logTailLines, 0):]
	return fmt.Sprintf("the end of its log, %s:\n\t%s", p.log.Name(), strings.Join(lines, "\n\t"))
}
