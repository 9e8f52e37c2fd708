package console

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The issue 31 drill's pages, in a real browser: where layout or what the
// browser posts is the point.

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
