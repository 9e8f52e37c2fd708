package human

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCount(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 18022: "18,022", 1234567: "1,234,567", -4200: "-4200"} {
		require.Equal(t, want, Count(n))
	}
	require.Equal(t, "1 message", Plural(1, "message"))
	require.Equal(t, "0 messages", Plural(0, "message"))
	require.Equal(t, "12,000 messages", Plural(12000, "message"))
}

func TestPayload(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		payload, kind, text string
	}{
		{"", PayloadEmpty, ""},
		{`{"order":1}`, PayloadJSON, "{\n  \"order\": 1\n}"},
		{"line one\nline two\t<b>", PayloadText, "line one\nline two\t<b>"},
		{"\xde\xad\xbe\xef", PayloadBinary, "00000000  de ad be ef                                       |....|"},
		{"bell\a", PayloadBinary, "00000000  62 65 6c 6c 07                                    |bell.|"},
	} {
		kind, text := Payload([]byte(tc.payload))
		require.Equal(t, tc.kind, kind, "%q", tc.payload)
		require.Equal(t, tc.text, text, "%q", tc.payload)
	}
}
