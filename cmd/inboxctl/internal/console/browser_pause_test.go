package console

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// In a real browser, as on-call does it: pause a consumer from its row on
// the overview (the confirmation asks for the reason), see the banner
// with who, since when and why, and resume it from the banner.
func TestPauseAndResumeInTheBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Actor: "oncall"})
	ctx := browser(t)
	text := func(sel string) string {
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err)
		return got
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.srv.URL+"/"),
		chromedp.Click(chromedp.CSS(`form[action="/pause"]:has(input[value="payments"]) button`)),
		chromedp.WaitVisible(chromedp.CSS("main.page-confirm"))))
	require.Contains(t, text("p.question"), `This would pause 1 consumer (consumer "payments": its dispatchers`)
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`input[name="note"]`), "gateway maintenance, OPS-415"),
		chromedp.Click(chromedp.CSS("button.go")),
		chromedp.WaitVisible(chromedp.CSS("main.page-overview div.paused"))))
	screenshot(t, ctx, "paused")
	banner := text("div.paused")
	require.Contains(t, banner, `Paused: consumer "payments", by oncall since `)
	require.Contains(t, banner, "“gateway maintenance, OPS-415”")
	require.Contains(t, text("table tbody tr:first-child td:first-child"), "paused")
	require.Len(t, b.pauses(t), 1)

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("div.paused button")),
		chromedp.WaitVisible(chromedp.CSS("main.page-confirm"))))
	require.Contains(t, text("p.question"), `This would resume 1 consumer (consumer "payments", paused by oncall since `)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("button.go")),
		chromedp.WaitVisible(chromedp.CSS("main.page-overview"))))
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("div.paused").length`))
	require.NoError(t, err)
	require.Zero(t, n, "no banner once resumed")
	require.Empty(t, b.pauses(t))
}
