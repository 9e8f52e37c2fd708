package console

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A message held behind a dead message of its ordering key is counted as
// blocked on the overview, its page links to the dead message holding the
// key, and the key links to the key's messages.
func TestBlockedMessageLinksItsHolder(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.exec(t, `
		UPDATE /* schema */inbox SET ordering_key = 'customer-7' WHERE message_id = 'order-1';
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, max_attempts, ordering_key, payload_hash, payload, bucket)
		VALUES ('payments', 'order-9', 'ChargeCard', 'pending', 3, 'customer-7', '\x00', '{}', /* schema */inbox_bucket('order-9'))`)

	code, body := b.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<th class="num">Blocked</th>`)
	require.Contains(t, body, `<span class="bad">1</span>`)

	code, body = b.get(t, "/message?consumer=payments&id=order-9")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `ordering key customer-7 is held by <a href="/message?consumer=payments&amp;db=test&amp;id=order-1">order-1</a> (dead since`)
	require.Contains(t, body, `<a href="/messages?consumer=payments&amp;db=test&amp;key=customer-7&amp;status=any">customer-7</a>`)
	require.NotContains(t, body, "<dt>Due</dt>")

	code, body = b.get(t, "/messages?consumer=payments&key=customer-7&status=any")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, ">order-9</a>")
	require.Contains(t, body, ">order-1</a>")
	require.NotContains(t, body, ">order-2</a>")
}
