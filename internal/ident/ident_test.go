package ident

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateSchema(t *testing.T) {
	t.Parallel()

	for _, ok := range []string{"pgbox", "Mixed Case", `we"ird`, "x; DROP TABLE y", strings.Repeat("s", 63), "café"} {
		require.NoError(t, ValidateSchema(ok), ok)
	}
	for name, want := range map[string]string{
		"":                        "schema name is empty",
		strings.Repeat("s", 64):   "is 64 bytes, over the 63-byte limit",
		"bad\x00name":             "contains a NUL character",
		string([]byte{0xff, 'a'}): "not valid UTF-8",
	} {
		err := ValidateSchema(name)
		require.Error(t, err, "%q", name)
		require.Contains(t, err.Error(), want)
	}
}

func TestRender(t *testing.T) {
	t.Parallel()

	require.Equal(t, `SELECT 1 FROM "pgbox".inbox JOIN "pgbox".outbox`,
		Render("SELECT 1 FROM /* schema */inbox JOIN /* schema */outbox", "pgbox"))
	require.Equal(t, `SELECT 1 FROM "a""b".inbox`, Render("SELECT 1 FROM /* schema */inbox", `a"b`))
}

func TestChannel(t *testing.T) {
	t.Parallel()

	require.Equal(t, "pgbox.inbox", Channel("pgbox", "inbox"))

	long := Channel(strings.Repeat("s", 63), "inbox")
	require.LessOrEqual(t, len(long), 63)
	require.True(t, strings.HasSuffix(long, ".inbox"))
	require.NotEqual(t, long, Channel(strings.Repeat("t", 63), "inbox"), "distinct schemas need distinct channels")
}
