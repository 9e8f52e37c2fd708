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
// error, not a wait until the context ends; a row that fails while others
// are published is waited for; and a drain with a dead row is not done.
func TestWaitReportsADrainThatCannotEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	out, err := outbox.New(pool, outbox.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := out.Write(ctx, tx, outbox.Message{Topic: "t", Payload: []byte("{}")}, outbox.Message{Topic: "t", Payload: []byte("{}")},
			outbox.Message{Topic: "t", Payload: []byte("{}")})
		return err
	}))
	set := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, ident.Render(sql, schema))
		require.NoError(t, err)
	}
	const stall = 200 * time.Millisecond
	waitFor := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return wait(ctx, pool, schema, stall)
	}
	drained := func() error { return waitFor(time.Minute) }

	// One row published just now (and, for the test, for the next hour):
	// the relay makes progress, and the failing rows are waited for.
	set(`UPDATE /* schema */outbox SET status = 'published', published_at = now() + interval '1 hour'
WHERE seq = (SELECT max(seq) FROM /* schema */outbox)`)
	set(`UPDATE /* schema */outbox SET attempts = 4, last_error = 'publish: refused' WHERE status = 'pending'`)
	require.ErrorIs(t, waitFor(3*stall), context.DeadlineExceeded, "rows failing while others are published are waited for")

	set(`UPDATE /* schema */outbox SET published_at = now() - interval '1 hour' WHERE status = 'published'`)
	err = drained()
	require.ErrorContains(t, err, "outboxdrain: the relay has published nothing for 200ms, and the next outbox row, ")
	require.ErrorContains(t, err, "failed 4 times: publish: refused")

	set(`UPDATE /* schema */outbox SET status = 'dead'
WHERE seq = (SELECT min(seq) FROM /* schema */outbox)`)
	set(`UPDATE /* schema */outbox SET status = 'published', published_at = now(), attempts = 0, last_error = NULL
WHERE status = 'pending'`)
	require.ErrorContains(t, drained(), "is dead after 4 attempts, never published: publish: refused")

	set(`UPDATE /* schema */outbox SET status = 'published', published_at = now() WHERE status = 'dead'`)
	require.NoError(t, drained())
}
