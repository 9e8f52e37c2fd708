package console

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// A spark chart scales its bars to the busiest bucket, skips empty ones,
// and escapes its title (a consumer's name) like any text.
func TestSparkDrawsBarsAndEscapesItsTitle(t *testing.T) {
	t.Parallel()
	p, err := parsePages()
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, p["overview"].ExecuteTemplate(&buf, "spark", spark([]int64{0, 2, 4}, `<b onmouseover="x">`)))
	svg := buf.String()
	require.Contains(t, svg, `<svg class="spark" width="11" height="24" viewBox="0 0 11 24"`)
	require.Contains(t, svg, `<rect x="4" y="12" width="3" height="11"/><rect x="8" y="0" width="3" height="23"/></svg>`)
	require.NotContains(t, svg, `<rect x="0"`, "an empty bucket draws no bar")
	require.NotContains(t, svg, "<b ")
	require.Contains(t, svg, `aria-label="&lt;b onmouseover=&#34;x&#34;&gt;"`)
	require.Contains(t, svg, `<title>&lt;b onmouseover=&#34;x&#34;&gt;</title>`)
}
