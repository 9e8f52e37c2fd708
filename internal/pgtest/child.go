package pgtest

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childEnv tells a re-executed test binary which role to play.
const childEnv = "PGBOX_TEST_CHILD"

// IsChild reports whether this process is a child started by StartChild.
func IsChild() bool { return os.Getenv(childEnv) != "" }

// ChildRole returns the role StartChild gave this process, or "" in the
// parent test process.
func ChildRole() string { return os.Getenv(childEnv) }

// Child is the test binary re-executed as a separate process: a real
// process the parent can SIGKILL at a moment of its choosing.
type Child struct {
	cmd      *exec.Cmd
	done     chan struct{}
	err      error
	killOnce sync.Once
	killed   chan struct{}
	lines    chan string
	mu       sync.Mutex
	stderr   bytes.Buffer
}

// StartChild re-executes the test binary to run only the test named run
// (an entry point that switches on ChildRole), playing role, with the test
// database's URL and env added to its environment. Every line the child
// prints on stdout is delivered by Line. A child still running when the
// test ends is killed.
func StartChild(tb testing.TB, run, role string, env ...string) *Child {
	tb.Helper()
	// A child lives as long as the test that starts it may (which kills it
	// at cleanup), plus a margin; the timeout only stops an orphan.
	timeout := 10 * time.Minute
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := t.Deadline(); ok {
			timeout = time.Until(deadline) + time.Minute
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1", "-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), childEnv+"="+role, "DATABASE_URL="+URL(tb))
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	c := &Child{cmd: cmd, done: make(chan struct{}), killed: make(chan struct{}), lines: make(chan string, 1024)}
	cmd.Stderr = &lockedWriter{mu: &c.mu, w: &c.stderr}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("pgtest: start child %s: %v", role, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			case <-c.killed: // nobody will read it: drain so the child never blocks
			}
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.done)
	}()
	tb.Cleanup(func() {
		c.Kill()
		if tb.Failed() {
			tb.Logf("child %s stderr:\n%s", role, c.Stderr())
		}
	})
	return c
}

// Line waits up to timeout for the child's next stdout line. ok is false if
// the child exited or the time ran out first.
func (c *Child) Line(timeout time.Duration) (line string, ok bool) {
	select {
	case line, ok = <-c.lines:
		return line, ok
	case <-time.After(timeout):
		return "", false
	}
}

// Kill sends SIGKILL, the signal no process can catch, and waits for the
// child to be gone.
func (c *Child) Kill() {
	c.killOnce.Do(func() { close(c.killed) })
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// Signal sends sig to the child, such as SIGTERM for a clean stop.
func (c *Child) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }

// Wait waits for the child to exit by itself, up to ctx, and returns its
// exit error.
func (c *Child) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited reports whether the child has exited.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Stderr returns what the child wrote on stderr so far.
func (c *Child) Stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
