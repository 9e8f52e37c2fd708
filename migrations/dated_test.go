package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/migrations"
)

// Version 11 lets the inbox's day partitions made at version 10, which
// checked that every id is a UUIDv7 of the day, hold foreign ids dated by
// an IDTime; rolled back to 10 with such a row kept, it refuses, changing
// nothing, and without one it brings the checks back.
func TestVersionElevenLetsDaysHoldDatedForeignIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)
	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()
	_, err = m.Up(ctx)
	require.NoError(t, err)
	idChecks := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, ident.Render(`
			SELECT count(*) FROM pg_catalog.pg_constraint AS k JOIN pg_catalog.pg_inherits AS i ON i.inhrelid = k.conrelid
			WHERE i.inhparent = '/* schema */inbox'::regclass AND k.contype = 'c'
			  AND pg_catalog.pg_get_constraintdef(k.oid) LIKE '%message_id%'`, schema)).Scan(&n))
		return n
	}
	require.Zero(t, idChecks())
	_, err = m.DownTo(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1+partition.AheadDefault+1, idChecks(), "the default partition and each day's, as version 10 made them")

	_, err = m.Up(ctx)
	require.NoError(t, err)
	require.Zero(t, idChecks())
	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema})
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	o, err := in.Receive(ctx, inbox.Message{ID: "sqs-1", IDTime: now, EventType: "E"})
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, o)

	_, err = m.DownTo(ctx, 10)
	require.ErrorContains(t, err, "cannot roll back to version 10: the inbox holds messages dated by their IDTime")
	v, err := m.Version(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 11, v)
	require.Zero(t, idChecks(), "nothing changed")

	_, err = pool.Exec(ctx, ident.Render("DELETE FROM /* schema */inbox WHERE message_id = 'sqs-1'", schema))
	require.NoError(t, err)
	_, err = m.DownTo(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1+partition.AheadDefault+1, idChecks())
}
