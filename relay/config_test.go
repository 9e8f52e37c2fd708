package relay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/relay"
)

// The relay prunes only when asked to (the deprecated Retention and
// PruneInterval); by default package maintenance does.
func TestPruningIsOffByDefault(t *testing.T) {
	t.Parallel()
	def := relay.Config{}.WithDefaults()
	require.Zero(t, def.Retention)
	require.Zero(t, def.PruneInterval)

	legacy := relay.Config{PruneInterval: time.Second}.WithDefaults()
	require.Equal(t, relay.RetentionDefault, legacy.Retention) //nolint:staticcheck // deprecated, still honoured
	legacy = relay.Config{Retention: time.Hour}.WithDefaults()
	require.Equal(t, relay.PruneIntervalDefault, legacy.PruneInterval) //nolint:staticcheck // deprecated, still honoured
	kept := relay.Config{Retention: -1}.WithDefaults()
	require.EqualValues(t, -1, kept.Retention)
	require.Zero(t, kept.PruneInterval)
}
