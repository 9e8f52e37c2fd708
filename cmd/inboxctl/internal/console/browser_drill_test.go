package console

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/pgtext"
)

// The issue 31 drill's pages, in a real browser: where layout or what the
// browser posts is the point.

// errorBytesMax is what the dispatcher keeps of a handler's error text
// (dispatcher's maxErrorBytes).
const errorBytesMax = 8 << 10

// A hostile error pattern (8 KB of NUL bytes, as the dispatcher records
// them; or any long text) is cut in the failures table as inboxctl
// failures cuts it, so every group's Replay… and Discard… stay on screen;
// the whole pattern is one click away.
func TestLongErrorPatternKeepsActionsOnScreen(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	nul := pgtext.Clean(strings.Repeat("\x00", errorBytesMax), errorBytesMax)
	long := pgtext.Clean(strings.Repeat("upstream said: <html><body>502 Bad Gateway</body></html>\n", 200), errorBytesMax)
	b.exec(t, `INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		last_error, errors, received_at, available_at, bucket)
		SELECT 'imports', 'row-' || g, CASE WHEN g % 2 = 0 THEN 'RowParsed' ELSE 'RowFetched' END, 'dead', 1, 1, '\x00', '{}',
		       CASE WHEN g % 2 = 0 THEN $1 ELSE $2 END,
		       jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '1 minute',
		                                            'error', CASE WHEN g % 2 = 0 THEN $1 ELSE $2 END)),
		       now() - interval '2 minutes', now(), /* schema */inbox_bucket('row-' || g)
		FROM generate_series(1, 8) AS g`, nul, long)
	groups, err := b.adm.Failures(context.Background(), admin.FailuresOptions{})
	require.NoError(t, err)
	require.Len(t, groups, 5, "the fixture's three groups and the two long ones")
	var nulPattern string
	for _, g := range groups {
		if g.EventType == "RowParsed" {
			nulPattern = g.Normalized
		}
	}
	require.Greater(t, len(nulPattern), errorBytesMax, "the NUL bytes' pattern is long")

	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.srv.URL+"/failures"), chromedp.WaitVisible(chromedp.CSS("main.page-failures"))))
	screenshot(t, ctx, "failures-long")
	type box struct{ Top, Bottom, Left, Right, Height float64 }
	boxes := func(css string) []box { // where each element css selects is, in the viewport
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]box](`[...document.querySelectorAll(`+strconv.Quote(css)+`)].map(e => {
			const r = e.getBoundingClientRect();
			return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: r.height};
		})`))
		require.NoError(t, err)
		return got
	}
	rows := boxes("table.groups tbody tr")
	require.Len(t, rows, 5)
	for i, r := range rows {
		require.Less(t, r.Height, 150.0, "row %d is %.0f px tall", i+1, r.Height)
	}
	buttons := boxes("table.groups td.actions button")
	require.Len(t, buttons, 9, "a Replay… for each group, a Discard… for the four with dead messages")
	viewport, err := chromedp.Run(ctx, chromedp.Evaluate[box](`({Bottom: window.innerHeight, Right: window.innerWidth})`))
	require.NoError(t, err)
	for i, bt := range buttons {
		require.True(t, bt.Top >= 0 && bt.Bottom <= viewport.Bottom && bt.Left >= 0 && bt.Right <= viewport.Right,
			"button %d at %+v is off the %+v screen", i+1, bt, viewport)
	}

	// One click shows the whole pattern.
	sel := `//table[contains(@class,"groups")]//tr[td[normalize-space(text()[1])="RowParsed"]]//td[contains(@class,"error")]`
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.Search(sel+"//summary"))))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(sel+"//details//pre"))))
	whole, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.Search(sel+"//details//pre")))
	require.NoError(t, err)
	require.Equal(t, nulPattern, whole, "the whole pattern, once opened")
}

// What the confirmation's pace fields hold is what the replay does: a
// rate typed into the page schedules a throttled replay, and nothing is
// replayed at once. Before, the rate was ignored unless its choice was
// clicked too, and the whole group was replayed at once.
func TestConfirmPageThrottlesWhatIsTyped(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.srv.URL+"/failures"),
		chromedp.Click(chromedp.CSS(`table.groups tbody tr:first-child form[action="/replay"] button`)),
		chromedp.WaitVisible(chromedp.CSS("main.page-confirm")),
		chromedp.SendKeys(chromedp.CSS(`input[name="rate"]`), "1"),
		chromedp.Click(chromedp.CSS("button.go")),
		chromedp.WaitVisible(chromedp.CSS("main.page-scheduled, main.page-job"))))
	at, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Contains(t, at, "/scheduled?", "a throttled replay is scheduled, not run at once")
	row, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("tr.highlight")))
	require.NoError(t, err)
	require.Contains(t, row, "1/s")
	require.Contains(t, row, "0 of 3")
	require.Equal(t, 3, b.count(t, "status = 'dead' AND consumer = 'payments'"), "nothing was replayed at once")
}
