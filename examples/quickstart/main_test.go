package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/examples/internal/inspect"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// The demo, smaller: it must keep passing its own verification.
func TestQuickstartVerifies(t *testing.T) {
	t.Parallel()
	pgtest.URL(t) // fails with advice when there is no database
	schema := pgtest.EmptySchema(t)

	var out bytes.Buffer
	require.NoError(t, run(60, 3, schema, time.Minute, &out), out.String())
	require.Regexp(t, `paid exactly once +60/60 +paid twice: 0, unpaid: 0`, out.String())
	require.Contains(t, out.String(), "verification passed")
	// It ends with commands that work pasted into a shell without
	// DATABASE_URL: they carry the URL and the schema.
	require.Contains(t, out.String(), inspect.Inboxctl(pgtest.URL(t), "stats", "--schema", schema)+"\n")
	require.Contains(t, out.String(), "psql ")

	var dead int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		ident.Render("SELECT count(*) FROM /* schema */inbox WHERE status = 'dead' AND attempts = 3", schema)).Scan(&dead))
	require.Equal(t, 3, dead)
}

func TestMain(m *testing.M) { pgtest.Main(m) }
