package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// childRole marks the test binary, re-executed, as inboxctl itself: it
// runs main with the arguments it was given, signal wiring included.
const childRole = "inboxctl"

func TestMain(m *testing.M) {
	if pgtest.ChildRole() == childRole {
		main() // exits
	}
	pgtest.Main(m)
}

// process is inboxctl running as a process of its own.
type process struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed once it has exited
	stderr *watched
	stdout *watched
}

// startInboxctl runs inboxctl with args on schema of the test database.
// Its stdin is a pipe nobody writes to, as a terminal where nobody types:
// a read of it never returns. It is killed if still running when the test
// ends.
func startInboxctl(t *testing.T, schema string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], append(args, "--schema", schema)...)
	cmd.Env = append(os.Environ(), "PGBOX_TEST_CHILD="+childRole, "DATABASE_URL="+pgtest.URL(t))
	p := &process{cmd: cmd, done: make(chan struct{}), stderr: newWatched(), stdout: newWatched()}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		stdin.Close()
	})
	return p
}

// signal sends sig to the process, unless it has ended.
func (p *process) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); !errors.Is(err, os.ErrProcessDone) {
		require.NoError(t, err)
	}
}

// wait waits up to timeout for the process to end, and fails the test if
// it does not.
func (p *process) wait(t *testing.T, timeout time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState
	case <-time.After(timeout):
		t.Fatalf("inboxctl still runs %s later; stderr: %s", timeout, p.stderr)
		return nil
	}
}

// watched is an output stream that can be waited on for a text.
type watched struct {
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced at every write
	mu      sync.Mutex
}

func newWatched() *watched { return &watched{changed: make(chan struct{})} }

func (w *watched) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	return w.buf.Write(p)
}

func (w *watched) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until the stream holds want, or p ends first.
func (w *watched) waitFor(t *testing.T, p *process, want string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		w.mu.Lock()
		seen, changed := strings.Contains(w.buf.String(), want), w.changed
		w.mu.Unlock()
		if seen {
			return
		}
		select {
		case <-changed:
		case <-p.done:
			t.Fatalf("inboxctl ended without printing %q; stdout: %s; stderr: %s", want, p.stdout, p.stderr)
		case <-timeout:
			t.Fatalf("inboxctl did not print %q within a minute; stderr: %s", want, p.stderr)
		}
	}
}

// deadMessages makes a schema whose inbox holds n dead messages of
// consumer payments, m-1 to m-n, in that order of arrival.
func deadMessages(t *testing.T, n int) string {
	t.Helper()
	schema := pgtest.Schema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		SELECT 'payments', 'm-' || i, 'OrderPlaced', 'dead', 5, 5, '\x00', '', 'timeout', /* schema */inbox_bucket('m-' || i)
		FROM generate_series(1, $1::int) AS i ORDER BY i`, schema), n)
	require.NoError(t, err)
	return schema
}

// replayed counts the messages of schema replayed so far.
func replayed(t *testing.T, schema string) (n int) {
	t.Helper()
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		ident.Render(`SELECT count(*) FROM /* schema */inbox WHERE replays > 0`, schema)).Scan(&n))
	return n
}

// A real SIGINT (Ctrl-C) at a confirmation prompt ends inboxctl at once,
// although nobody answers the prompt, with exit status 130, changing
// nothing.
func TestSIGINTAtPromptExits130AtOnce(t *testing.T) {
	t.Parallel()
	schema := deadMessages(t, 3)
	p := startInboxctl(t, schema, "replay", "--consumer", "payments", "--status", "dead")
	p.stderr.waitFor(t, p, "Type yes to continue:")

	p.signal(t, syscall.SIGINT)
	state := p.wait(t, 10*time.Second)
	require.Equal(t, 130, state.ExitCode(), "stderr: %s", p.stderr)
	require.Contains(t, p.stderr.String(), "inboxctl: interrupted at the prompt: nothing was replayed")
	require.Empty(t, p.stdout.String())
	require.Zero(t, replayed(t, schema))
}

// During a bulk replay, the first SIGINT lets the batch under way finish;
// a second ends the process at once, without waiting for it: here that
// batch waits for a row lock the test never lets go of.
func TestSecondSIGINTEndsABulkChangeAtOnce(t *testing.T) {
	t.Parallel()
	schema := deadMessages(t, 50)
	ctx := context.Background()
	holder, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, holder.Rollback(ctx)) })
	_, err = holder.Exec(ctx, ident.Render(`SELECT 1 FROM /* schema */inbox WHERE message_id = 'm-15' FOR UPDATE`, schema))
	require.NoError(t, err)

	p := startInboxctl(t, schema, "replay", "--consumer", "payments", "--status", "dead", "--batch-size", "10", "--yes")
	pgtest.WaitBlockedBy(t, holder, p.done)
	require.Equal(t, 10, replayed(t, schema), "the first batch committed, the second waits")

	p.signal(t, syscall.SIGINT)
	// A SIGINT that arrives before inboxctl has taken the first is
	// absorbed by it, as a second Ctrl-C pressed that fast would be: the
	// second is sent again until the process ends, within a deadline.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for ended := false; !ended; {
		select {
		case <-p.done:
			ended = true
		case <-tick.C:
			p.signal(t, syscall.SIGINT)
		case <-deadline:
			t.Fatalf("inboxctl still waits for its batch after a second SIGINT; stderr: %s", p.stderr)
		}
	}
	status, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, status.Signaled(), "ended by the signal, not by exiting: %v; stderr: %s", p.cmd.ProcessState, p.stderr)
	require.Equal(t, syscall.SIGINT, status.Signal())
	require.Empty(t, p.stdout.String(), "it did not wait to report")
	require.Equal(t, 10, replayed(t, schema), "the batch under way never committed while its lock was held")
}
