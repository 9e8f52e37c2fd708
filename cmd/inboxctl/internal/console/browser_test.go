package console

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
)

// After a change to the pages, take docs/console.md's screenshots again
// with (from the repository's root, the database as for every test):
//
//	go test -count=1 -run '^TestOnCallPath$' ./cmd/inboxctl/internal/console/ -update-screenshots
var updateScreenshots = flag.Bool("update-screenshots", false, "write docs/console/*.png from the browser test")

// repoRoot is the repository's root, from this package's folder.
var repoRoot = filepath.Join("..", "..", "..", "..")

// chromium returns the path of Debian's Chromium, installed by
// scripts/chromium.sh when missing (as root), or skips the test saying
// how to get one.
func chromium(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, "scripts", "chromium.sh"), "path").Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Skipf("no Chromium for the browser test, and it cannot be installed here: %s", strings.TrimSpace(string(exit.Stderr)))
	}
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// browser starts a headless Chromium of the test's own, with a throwaway
// profile and the flags a machine without a network needs (no background
// networking, no component updates, no QUIC), and returns its context.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(1280, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelBrowser()
		cancelAlloc()
	})
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	return ctx
}

// failingService receives messages into an inbox and runs a dispatcher
// whose ChargeCard handler fails, as a payment gateway that is down would,
// until gatewayUp is set; a maintainer runs beside it.
type failingService struct {
	adm       *admin.Admin
	gatewayUp atomic.Bool
	schema    string
}

// startService starts a failingService on a fresh schema, receives
// charges ChargeCard messages and two OrderPlaced ones that panic, and
// waits for all of them to be dead.
func startService(t *testing.T, charges int) *failingService {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := &failingService{schema: pgtest.Schema(t)}
	var err error
	s.adm, err = admin.New(pool, admin.Config{Schema: s.schema})
	require.NoError(t, err)
	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", MaxAttempts: 2, Schema: s.schema})
	require.NoError(t, err)
	for i := 1; i <= charges; i++ {
		_, err := in.Receive(ctx, inbox.Message{ID: fmt.Sprintf("order-%d/charge", i), EventType: "ChargeCard",
			Payload:  []byte(fmt.Sprintf(`{"order":%d,"cents":%d,"currency":"EUR"}`, i, 1000+i)),
			Metadata: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
		require.NoError(t, err)
	}
	for i := 1; i <= 2; i++ {
		_, err := in.Receive(ctx, inbox.Message{ID: fmt.Sprintf("import-%d", i), EventType: "OrderPlaced", Payload: []byte{0xde, 0xad, 0xbe, 0xef}})
		require.NoError(t, err)
	}
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Inbox: in, Logger: quiet, PollInterval: 20 * time.Millisecond, ProcessName: "payments-7f9c",
		RetryBackoffFunc: func(int) time.Duration { return 10 * time.Millisecond },
		Handlers: map[string]dispatcher.Handler{
			"ChargeCard": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
				if !s.gatewayUp.Load() {
					return fmt.Errorf("payment gateway timeout after %ds (request %s)", 29+m.Attempt, uuid.New())
				}
				return nil
			}),
			"OrderPlaced": dispatcher.InTx(func(context.Context, pgx.Tx, *dispatcher.Message) error {
				var lines []string
				return errors.New(lines[5]) // index out of range: a panic, with its stack
			}),
		},
	})
	require.NoError(t, err)
	m, err := maintenance.New(pool, maintenance.Config{Schema: s.schema, Logger: quiet, ID: "maintainer-1", ProcessName: "payments-maint-1"})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() {
		require.NoError(t, d.Stop(ctx))
		require.NoError(t, m.Stop(ctx))
	})
	s.waitCount(t, admin.Filter{Statuses: []pgbox.InboxStatus{pgbox.InboxDead}}, int64(charges+2))
	require.Eventually(t, func() bool {
		ps, err := s.adm.Processes(ctx)
		require.NoError(t, err)
		return ps.Leader != nil && ps.Leader.ProcessID != 0
	}, 30*time.Second, 20*time.Millisecond, "no maintenance leader elected")
	return s
}

// waitCount waits until f matches n messages.
func (s *failingService) waitCount(t *testing.T, f admin.Filter, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := s.adm.Count(context.Background(), f)
		require.NoError(t, err)
		return got == n
	}, 30*time.Second, 10*time.Millisecond, "waiting for %d messages of %s", n, describe(f))
}

// TestOnCallPath walks what an on-call engineer does, in a real browser,
// against a real service whose payment gateway is down: open the
// overview, follow the dead messages to their failure group, open one
// message, replay the group once the gateway is back (confirming the dry
// run), watch the replay finish and the group drain.
func TestOnCallPath(t *testing.T) {
	t.Parallel()
	svc := startService(t, 12)
	c, err := New(Config{Actor: "oncall", Targets: []Target{{Admin: svc.adm, Name: "payments", Where: "schema " + svc.schema}}})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, c.Close(context.Background()))
	})
	ctx := browser(t)
	visible := func(sel string) string { // the text of the first element the CSS selector sel finds, once it shows
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))))
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err)
		return text
	}
	run := func(actions ...chromedp.Action[chromedp.Void]) { require.NoError(t, chromedp.Do(ctx, actions...)) }

	run(chromedp.Navigate(srv.URL + "/"))
	visible("main.page-overview")
	require.Contains(t, visible("section.summary"), "14 dead messages")
	require.Contains(t, visible("main"), "Maintenance leader: payments-maint-1 (host ")
	screenshot(t, ctx, "overview")

	run(chromedp.Click(chromedp.CSS(`section.summary a[href^="/failures"]`)))
	visible("main.page-failures")
	row := visible("table.groups tbody tr:first-child")
	require.Contains(t, row, "payment gateway timeout after <n>s (request <uuid>)")
	require.Contains(t, row, "ChargeCard")
	screenshot(t, ctx, "failures")

	run(chromedp.Click(chromedp.CSS("table.groups tbody tr:first-child a.fp")))
	visible("main.page-messages")
	require.Contains(t, visible("table tbody"), "order-12/charge")
	screenshot(t, ctx, "group")

	run(chromedp.Click(chromedp.CSS("a.msg")))
	visible("main.page-message")
	require.Contains(t, visible("pre.payload"), `"currency": "EUR"`)
	require.Contains(t, visible("ol.history"), "attempt 2 failed: payment gateway timeout after 31s")
	screenshot(t, ctx, "message")

	run(chromedp.Click(chromedp.CSS(`header nav a[href^="/failures"]`)), chromedp.WaitVisible(chromedp.CSS("main.page-failures")),
		chromedp.Click(chromedp.CSS(`table.groups tbody tr:first-child form[action="/replay"] button`)))
	visible("main.page-confirm")
	require.Contains(t, visible("p.question"), "This would replay 12 messages")
	run(chromedp.SendKeys(chromedp.CSS(`input[name="note"]`), "gateway back, INC-2291"))
	screenshot(t, ctx, "confirm")

	svc.gatewayUp.Store(true)
	run(chromedp.Click(chromedp.CSS("button.go")))
	visible("main.page-job")
	require.Contains(t, visible("h1"), "Background replay")
	group := admin.Filter{Consumer: "payments", EventType: "ChargeCard", ReplayableOnly: true}
	svc.waitCount(t, group, 0) // replayed, then handled by the dispatcher: the group drained
	run(chromedp.Reload())
	visible("main.page-job")
	require.Contains(t, visible("p.done"), "Finished")
	require.Contains(t, visible("p.progress-line"), "12 replayed of 12")
	screenshot(t, ctx, "replayed")

	run(chromedp.Click(chromedp.CSS("a.next")))
	visible("main.page-messages")
	require.Contains(t, visible("table tbody"), "No message matches: the group has drained")
	run(chromedp.Click(chromedp.CSS(`header nav a[href^="/audit"]`)))
	visible("main.page-audit")
	row = visible("table tbody tr:first-child")
	require.Contains(t, row, "oncall")
	require.Contains(t, row, "replay")
	require.Contains(t, row, "gateway back, INC-2291")
	screenshot(t, ctx, "audit")

	run(chromedp.Click(chromedp.CSS(`header nav a[href="/?db=payments"]`)))
	visible("main.page-overview")
	summary := visible("section.summary")
	require.Contains(t, summary, "2 dead messages", "the panicking imports are left")
	require.NotContains(t, summary, "14 dead")
	screenshot(t, ctx, "drained")
}

// screenshot writes the browser's view to docs/console/name.png when the
// test runs with -update-screenshots.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*updateScreenshots {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	dir := filepath.Join(repoRoot, "docs", "console")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}
