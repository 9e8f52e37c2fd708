package cli

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// A purge inside the default retention warns that it ends duplicate
// detection, and still needs --yes or confirmation; a longer one does not
// warn.
func TestPurgeShortWindowWarns(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	const warning = "Purging ends duplicate detection for these messages"

	dry := inboxctl(t, schema, "", "purge", "--older-than", "0s", "--dry-run").ok(t)
	require.Contains(t, dry.stderr, "inboxctl: warning: --older-than 0s is shorter than 7d, the retention pgbox keeps by default.")
	require.Contains(t, dry.stderr, warning)
	require.Contains(t, dry.stderr, "a redelivery of one (a producer's retry, a broker's redelivery) is stored and handled again")

	declined := inboxctl(t, schema, "", "purge", "--older-than", "0s")
	require.Equal(t, ExitFailure, declined.code, "no answer is no")
	require.Contains(t, declined.stderr, warning)
	require.Contains(t, declined.stderr, "not confirmed: nothing was deleted")
	var done int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), ident.Render(
		"SELECT count(*) FROM /* schema */inbox WHERE status = 'done'", schema)).Scan(&done))
	require.Equal(t, 2, done)

	require.NotContains(t, inboxctl(t, schema, "", "purge", "--older-than", "30d", "--dry-run").ok(t).stderr, warning)
	require.Contains(t, inboxctl(t, schema, "", "purge", "--help").ok(t).stdout, "An --older-than shorter than 7d")

	yes := inboxctl(t, schema, "", "purge", "--older-than", "0s", "--yes").ok(t)
	require.Contains(t, yes.stderr, warning)
	require.Equal(t, "Deleted 2 done messages.\n", yes.stdout)
}
