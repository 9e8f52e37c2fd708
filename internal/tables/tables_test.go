package tables

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
)

// TestLiteralsAreWords checks that every status can stand in a SQL string
// literal as it is: a lower-case word, with no quote to escape.
func TestLiteralsAreWords(t *testing.T) {
	t.Parallel()
	word := regexp.MustCompile(`^[a-z_]+$`)
	for _, s := range pgbox.InboxStatuses() {
		require.Regexp(t, word, string(s))
	}
	for _, s := range pgbox.OutboxStatuses() {
		require.Regexp(t, word, string(s))
	}
}
