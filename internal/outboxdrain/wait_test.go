package outboxdrain

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A drain that cannot end is an error naming the row and the relay's
// error, not a wait until the context ends, and a drain with a dead row
// is not done.
func TestWaitReportsADrainThatCannotEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	out, err := outbox.New(pool, outbox.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := out.Write(ctx, tx, outbox.Message{Topic: "t", Payload: []byte("{}")}, outbox.Message{Topic: "t", Payload: []byte("{}")})
		return err
	}))
	set := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, ident.Render(sql, schema))
		require.NoError(t, err)
	}
	waitFor := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return Wait(ctx, pool, schema)
	}
	wait := func() error { return waitFor(time.Minute) }

	set(`UPDATE /* schema */outbox SET attempts = 2, last_error = 'publish: refused'`)
	require.ErrorIs(t, waitFor(300*time.Millisecond), context.DeadlineExceeded, "rows that failed fewer times are waited for")

	set(`UPDATE /* schema */outbox SET attempts = 3`)
	require.ErrorContains(t, wait(), "failed to publish outbox row")
	require.ErrorContains(t, wait(), "3 times, and the drain cannot end: publish: refused")

	set(`UPDATE /* schema */outbox SET status = 'dead'
WHERE seq = (SELECT min(seq) FROM /* schema */outbox)`)
	set(`UPDATE /* schema */outbox SET status = 'published', published_at = now(), attempts = 0, last_error = NULL
WHERE status = 'pending'`)
	require.ErrorContains(t, wait(), "is dead after 3 attempts, never published: publish: refused")

	set(`UPDATE /* schema */outbox SET status = 'published', published_at = now() WHERE status = 'dead'`)
	require.NoError(t, wait())
}
