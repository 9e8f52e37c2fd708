package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/pgtest"
)

// consumerExitCode is how a consumer ends by itself: its subscription
// broke (the database restarted) and it leaves its replacement to the
// driver (startConsumer). Any other end of any child is a failure.
const consumerExitCode = 4

// logTailLines is how much of a child's log a failure shows.
const logTailLines = 20

// child is one of the run's processes, with its log: a file of its own
// (CHAOS_LOG) that it writes at level Warn, kept after it is killed.
type child struct {
	*pgtest.Child
	gone   chan struct{} // closed once the process has ended
	err    error         // its exit error, once gone is closed
	killed bool          // SIGKILLed by the driver's schedule
	log    string        // the log file's path
	name   string        // role-n: the nth process of its role
	role   string
}

// exited reports whether the process has ended, and its exit error.
func (c *child) exited() (bool, error) {
	select {
	case <-c.gone:
		return true, c.err
	default:
		return false, nil
	}
}

// kill SIGKILLs the process on the driver's schedule.
func (c *child) kill() {
	c.killed = true
	c.Kill()
}

// tail is the end of the child's log, and of its stderr (a panic, a
// failed start) if it wrote any, for a failure message.
func (c *child) tail() string {
	status := "running"
	if gone, err := c.exited(); c.killed {
		status = "SIGKILLed by the schedule"
	} else if gone {
		status = fmt.Sprintf("ended: %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- the end of %s's log (%s; %s):\n%s", c.name, c.log, status, lastLines(readLog(c.log), logTailLines))
	if stderr := strings.TrimSpace(c.Stderr()); stderr != "" {
		fmt.Fprintf(&b, "--- and of its stderr:\n%s", lastLines(stderr, logTailLines))
	}
	return b.String()
}

// printed returns the next lines the child printed on stdout and no one
// has read, up to logTailLines: where a child that failed (t.Fatal) said
// why.
func (c *child) printed() string {
	var out []string
	for l, ok := c.Line(100 * time.Millisecond); ok && len(out) < logTailLines; l, ok = c.Line(100 * time.Millisecond) {
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	return string(b)
}

// lastLines returns the last n lines of s, each cut to a readable length,
// or a note that s is empty.
func lastLines(s string, n int) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "(empty)\n"
	}
	lines := strings.Split(s, "\n")
	lines = lines[max(0, len(lines)-n):]
	for i, l := range lines {
		if len(l) > 600 {
			lines[i] = l[:600] + "…"
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// fleet is the run's child processes, by role.
type fleet struct {
	t       *testing.T
	url     string
	env     []string // every child's environment besides DATABASE_URL
	all     []*child // every child ever started, in order
	byRole  map[string][]*child
	kills   map[string]int
	logDir  string
	phase   string // the run's current phase, for a failure message
	started map[string]int
}

// newFleet returns an empty fleet whose children log into a directory of
// the run's own: next to the -chaos.report file, and kept; otherwise a
// temporary one, deleted unless the test fails.
func newFleet(t *testing.T, url string) *fleet {
	var dir string
	if *flagReport != "" {
		dir = filepath.Join(filepath.Dir(*flagReport), "chaos-logs", time.Now().Format("20060102-150405"))
		require.NoError(t, os.MkdirAll(dir, 0o755))
	} else {
		var err error
		dir, err = os.MkdirTemp("", "pgbox-chaos-logs-")
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		if !t.Failed() && *flagReport == "" {
			_ = os.RemoveAll(dir)
		}
	})
	return &fleet{t: t, url: url, byRole: map[string][]*child{}, kills: map[string]int{}, logDir: dir, phase: "start", started: map[string]int{}}
}

// logTailsIfFailed shows, for a failed test, the end of every child's
// log. The driver defers it: it must run before the test's cleanup kills
// the children, so that it tells the ones that died from the ones alive.
func (f *fleet) logTailsIfFailed() {
	if !f.t.Failed() {
		return
	}
	f.t.Logf("the children's logs are kept in %s; the end of each:", f.logDir)
	for _, c := range f.all {
		f.t.Log(c.tail())
	}
}

func (f *fleet) start(role string, env ...string) *child {
	f.t.Helper()
	f.started[role]++
	c := &child{gone: make(chan struct{}), name: fmt.Sprintf("%s-%d", role, f.started[role]), role: role}
	c.log = filepath.Join(f.logDir, c.name+".log")
	env = append(append(env, f.env...), "DATABASE_URL="+f.url, "CHAOS_LOG="+c.log)
	c.Child = pgtest.StartChild(f.t, "TestChildProcess", role, env...)
	go func() {
		c.err = c.Wait(context.Background())
		close(c.gone)
	}()
	f.all = append(f.all, c)
	if role != "producer" {
		line, ok := c.Line(2 * time.Minute)
		if !ok || line != "ready" {
			select { // so that the message says how it ended, if it did
			case <-c.gone:
			case <-time.After(time.Second):
			}
			require.Fail(f.t, "a child process did not start", "%s did not say ready; it printed:\n%s\n%s", c.name, line+"\n"+c.printed(), c.tail())
		}
	}
	f.byRole[role] = append(f.byRole[role], c)
	return c
}

// killOne SIGKILLs a random process of role and starts its replacement.
func (f *fleet) killOne(role string) {
	children := f.byRole[role]
	i := rand.N(len(children))
	children[i].kill()
	f.kills[role]++
	f.byRole[role] = append(children[:i], children[i+1:]...)
	f.start(role)
}

// killAll SIGKILLs every process of role, for good.
func (f *fleet) killAll(role string) {
	for _, c := range f.byRole[role] {
		c.kill()
	}
	f.byRole[role] = nil
}

// replaceExited starts a new consumer for every one that ended by itself
// (its subscription broke when the database restarted).
func (f *fleet) replaceExited() {
	alive := f.byRole["consumer"][:0]
	exited := 0
	for _, c := range f.byRole["consumer"] {
		if gone, err := c.exited(); !gone {
			alive = append(alive, c)
		} else if exitCode(err) == consumerExitCode {
			exited++
		} else {
			f.failDead(c, err)
		}
	}
	f.byRole["consumer"] = alive
	for range exited {
		f.start("consumer")
	}
}

// requireAlive fails the test, naming the child and showing its log,
// unless every relay, dispatcher, flood and locker process the driver
// started is running or was killed by its schedule. Consumers are
// checked by replaceExited, which replaces those that end as planned.
func (f *fleet) requireAlive() {
	f.t.Helper()
	for _, role := range []string{"relay", "dispatcher", "flood", "locker"} {
		for _, c := range f.byRole[role] {
			if gone, err := c.exited(); gone {
				f.failDead(c, err)
			}
		}
	}
}

func (f *fleet) failDead(c *child, err error) {
	f.t.Helper()
	require.Failf(f.t, "a child process died unexpectedly",
		"%s ended by itself (%v) during the phase %q; none but the driver's schedule may end it\n%s", c.name, err, f.phase, c.tail())
}

// exitCode is a child's exit status, or -1 if it did not exit normally.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// allExited reports whether every child in children has ended.
func allExited(children []*child) bool {
	for _, c := range children {
		if gone, _ := c.exited(); !gone {
			return false
		}
	}
	return true
}
