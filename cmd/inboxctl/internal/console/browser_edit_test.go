package console

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
)

// Edit and replay in a real browser, where what the browser posts is the
// point: the text area's line breaks (sent as CR LF) and the confirmation's
// hidden copy of the payload arrive as typed, and the message stores
// exactly that.
func TestEditAndReplayInTheBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	fixed := "{\n  \"order\": 2,\n  \"cents\": 999,\n  \"currency\": \"EUR\",\n  \"note\": \"<b>tab\\there</b>\"\n}"

	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.srv.URL+"/message?consumer=payments&id=order-2"),
		chromedp.Click(chromedp.CSS(`form[action="/message/edit"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`form.edit textarea[name="payload"]`)),
		chromedp.SetValue(chromedp.CSS(`form.edit textarea[name="payload"]`), fixed),
		chromedp.Click(chromedp.CSS(`form.edit button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.confirm button.go`))))
	shown, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`pre.payload.new`)))
	require.NoError(t, err)
	require.Equal(t, fixed, shown, "the confirmation shows the payload as typed")
	screenshot(t, ctx, "edit-confirm")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`form.confirm button.go`)),
		chromedp.WaitVisible(chromedp.CSS(`main.page-message`))))
	d, err := b.adm.Show(context.Background(), "payments", "order-2")
	require.NoError(t, err)
	require.Equal(t, fixed, string(d.Payload), "stored byte for byte, line breaks as LF")
	require.Equal(t, pgbox.InboxPending, d.Status, "and replayed")
}
