package admin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// LookUpSchema tells a schema that does not exist from one without
// pgbox's tables, and lists the schemas that have them.
func TestLookUpSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	migrated, empty := pgtest.Schema(t), pgtest.EmptySchema(t)
	_, err := pool.Exec(ctx, "CREATE SCHEMA "+ident.Quote(empty)+"; CREATE TABLE "+ident.Quote(empty)+".inbox (id int)")
	require.NoError(t, err)

	l, err := LookUpSchema(ctx, pool, migrated)
	require.NoError(t, err)
	require.True(t, l.Exists)
	require.True(t, l.Migrations)
	require.Contains(t, l.Pgbox, migrated)
	require.NotContains(t, l.Pgbox, empty, "an inbox alone, without pgbox's migrations, is not pgbox's")

	l, err = LookUpSchema(ctx, pool, empty)
	require.NoError(t, err)
	require.True(t, l.Exists)
	require.False(t, l.Migrations)
	require.Contains(t, l.Pgbox, migrated)

	l, err = LookUpSchema(ctx, pool, migrated+"_typo")
	require.NoError(t, err)
	require.False(t, l.Exists)
	require.Contains(t, l.Pgbox, migrated)
}
