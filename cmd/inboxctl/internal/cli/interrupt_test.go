package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// watchedBuffer is a stream run writes to from its goroutine; seen closes
// once the output contains want.
type watchedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newWatchedBuffer(want string) *watchedBuffer {
	return &watchedBuffer{want: want, seen: make(chan struct{})}
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runAsync runs inboxctl with ctx in the background and returns its exit
// code on the channel, and a channel closed once it has ended.
func runAsync(t *testing.T, ctx context.Context, schema string, stdin io.Reader, stdout, stderr io.Writer, args ...string) (<-chan int, <-chan struct{}) {
	t.Helper()
	env := map[string]string{"DATABASE_URL": pgtest.URL(t)}
	code, ended := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(ended)
		code <- run(ctx, append(args, "--schema", schema), stdin, stdout, stderr, func(k string) string { return env[k] })
	}()
	return code, ended
}

// Ctrl-C at a confirmation prompt ends the command at once, although the
// prompt's read of stdin never returns: exit 130, nothing changed.
func TestInterruptAtPromptEndsAtOnce(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	stdin, typist := io.Pipe() // nobody types: a read never returns
	t.Cleanup(func() { typist.Close() })
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	var stdout bytes.Buffer
	stderr := newWatchedBuffer("Type yes to continue:")

	code, _ := runAsync(t, ctx, schema, stdin, &stdout, stderr, "replay", "--consumer", "payments", "--status", "dead")
	select {
	case <-stderr.seen:
	case c := <-code:
		t.Fatalf("ended with %d before prompting: %s", c, stderr.String())
	}
	interrupt()
	require.Equal(t, ExitInterrupted, <-code, "stderr: %s", stderr.String())
	require.Contains(t, stderr.String(), "inboxctl: interrupted at the prompt: nothing was replayed")
	require.Empty(t, stdout.String())
	for id, replays := range map[string]int{"order-2/placed": 0, "order-3/placed": 1, "bad-1": 0} {
		status, _, n := state(t, schema, "payments", id)
		require.Equal(t, []any{"dead", replays}, []any{status, n}, id)
	}
}

// An interrupted bulk replay stops after the batch under way and prints
// exactly how many it replayed, on a line of its own, and that running it
// again finishes it; running it again does.
func TestInterruptedBulkReplayPrintsExactCount(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	bg := context.Background()
	_, err := pool.Exec(bg, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		SELECT 'payments', 'm-' || i, 'OrderPlaced', 'dead', 5, 5, '\x00', '', 'timeout', /* schema */inbox_bucket('m-' || i)
		FROM generate_series(1, 50) AS i ORDER BY i`, schema))
	require.NoError(t, err)

	// Hold a row of the second batch, so the replay waits inside it.
	holder, err := pool.Begin(bg)
	require.NoError(t, err)
	defer holder.Rollback(bg)
	_, err = holder.Exec(bg, ident.Render(`SELECT 1 FROM /* schema */inbox WHERE message_id = 'm-15' FOR UPDATE`, schema))
	require.NoError(t, err)

	ctx, interrupt := context.WithCancel(bg)
	defer interrupt()
	var stdout, stderr bytes.Buffer
	code, ended := runAsync(t, ctx, schema, strings.NewReader(""), &stdout, &stderr,
		"replay", "--consumer", "payments", "--status", "dead", "--batch-size", "10", "--yes")
	pgtest.WaitBlockedBy(t, holder, ended)
	interrupt()
	require.NoError(t, holder.Rollback(bg)) // the batch under way finishes; no other starts

	require.Equal(t, ExitInterrupted, <-code, "stderr: %s", stderr.String())
	require.Equal(t, "Replayed 20 of 50 messages before the interruption.\n", stdout.String())
	require.Contains(t, stderr.String(), "inboxctl: interrupted: run the same command again to finish")
	var replayed int
	require.NoError(t, pool.QueryRow(bg, ident.Render(`SELECT count(*) FROM /* schema */inbox WHERE replays = 1`, schema)).Scan(&replayed))
	require.Equal(t, 20, replayed, "the printed count is what the database holds")

	again := inboxctl(t, schema, "", "replay", "--consumer", "payments", "--status", "dead", "--yes").ok(t)
	require.Equal(t, "Replayed 30 messages.\n", again.stdout)
}

// Interrupting stats --watch is a normal end, reported as an
// interruption like any other.
func TestInterruptedWatchExits130(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	frames := &frameCounter{cancelAfter: 2, cancel: cancel}
	var stderr bytes.Buffer
	code := run(ctx, []string{"stats", "--watch", "--interval", "100ms", "--schema", schema}, strings.NewReader(""), frames, &stderr,
		func(k string) string { return map[string]string{"DATABASE_URL": pgtest.URL(t)}[k] })
	require.Equal(t, ExitInterrupted, code)
	require.Empty(t, stderr.String())
	require.GreaterOrEqual(t, strings.Count(frames.String(), "INBOX"), 2)
}

// A confirmation takes the whole word: "y" is not yes, and changes
// nothing; "YES" is.
func TestConfirmNeedsTheWholeWord(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	for _, answer := range []string{"y\n", "Y\n", "ye\n", "yes please\n", "no\n"} {
		r := inboxctl(t, schema, answer, "replay", "--consumer", "payments", "--status", "dead")
		require.Equal(t, ExitFailure, r.code, "%q", answer)
		require.Contains(t, r.stderr, "not confirmed", "%q", answer)
		status, _, _ := state(t, schema, "payments", "bad-1")
		require.Equal(t, "dead", status, "%q changed nothing", answer)
	}
	require.Contains(t, inboxctl(t, schema, "y\n", "replay", "--consumer", "payments", "--status", "dead").stderr,
		"not confirmed: type yes, the whole word; nothing was replayed")
	require.Equal(t, "Replayed 3 messages.\n", inboxctl(t, schema, " YES \n", "replay", "--consumer", "payments", "--status", "dead").ok(t).stdout)
}

// Ctrl-C during the last batch of a bulk replay or discard, when nothing
// is left after it, is no interruption of the change: it is reported and
// audited as complete, exit 0, not "run the same command again". Both
// ways a walk can end are covered: a last batch shorter than
// --batch-size, and a full one after which nothing is left.
func TestInterruptDuringTheLastBatchIsComplete(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		messages int
		args     []string
		done     string
		audit    string
	}{
		{"replay, last batch short", 45, []string{"replay", "--consumer", "payments", "--status", "dead"}, "Replayed 45 messages.", "replay"},
		{"replay, last batch full", 50, []string{"replay", "--consumer", "payments", "--status", "dead"}, "Replayed 50 messages.", "replay"},
		{"discard, last batch full", 50, []string{"discard", "--consumer", "payments", "--reason", "drill"}, "Discarded 50 messages.", "discard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			schema := pgtest.Schema(t)
			pool := pgtest.Pool(t)
			bg := context.Background()
			_, err := pool.Exec(bg, ident.Render(`
				INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
				SELECT 'payments', 'm-' || i, 'OrderPlaced', 'dead', 5, 5, '\x00', '', 'timeout', /* schema */inbox_bucket('m-' || i)
				FROM generate_series(1, $1::int) AS i ORDER BY i`, schema), tc.messages)
			require.NoError(t, err)

			// Hold a row of the last batch, so the change waits inside it.
			holder, err := pool.Begin(bg)
			require.NoError(t, err)
			defer holder.Rollback(bg)
			_, err = holder.Exec(bg, ident.Render(`SELECT 1 FROM /* schema */inbox WHERE message_id = 'm-43' FOR UPDATE`, schema))
			require.NoError(t, err)

			ctx, interrupt := context.WithCancel(bg)
			defer interrupt()
			var stdout, stderr bytes.Buffer
			code, ended := runAsync(t, ctx, schema, strings.NewReader(""), &stdout, &stderr, append(tc.args, "--batch-size", "10", "--yes")...)
			pgtest.WaitBlockedBy(t, holder, ended)
			interrupt()
			require.NoError(t, holder.Rollback(bg)) // the last batch finishes

			require.Equal(t, ExitOK, <-code, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
			require.Equal(t, tc.done+"\n", stdout.String())
			require.Contains(t, stderr.String(), "the interruption came during the last batch: nothing is left")
			require.NotContains(t, stderr.String(), "run the same command again")

			var state string
			var affected int64
			require.NoError(t, pool.QueryRow(bg, ident.Render(`SELECT state, affected FROM /* schema */audit_log WHERE action = $1`, schema),
				tc.audit).Scan(&state, &affected))
			require.Equal(t, []any{"finished", int64(tc.messages)}, []any{state, affected})
		})
	}
}
