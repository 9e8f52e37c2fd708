package idempotency_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/idempotency"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestKeysExpire(t *testing.T) {
	t.Parallel()
	const expiry = time.Second
	m, b := setup(t, idempotency.Config{HandlerTimeout: 100 * time.Millisecond, Lease: 200 * time.Millisecond, Expiry: expiry})
	var runs atomic.Int64
	h := m.Wrap(charge(&runs))
	first := request{target: "/charges", key: "k", body: "first"}
	other := request{target: "/charges", key: "k", body: "other"}

	require.Equal(t, http.StatusCreated, send(h, first).Status)

	// The expiry is the database's clock plus Config.Expiry, exactly.
	var window time.Duration
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(
		"SELECT expires_at - created_at FROM /* schema */idempotency_keys WHERE key = 'k'")).Scan(&window))
	require.Equal(t, expiry, window)

	// Until then the key is the first request's; from then on it is new,
	// so another request may use it.
	again := send(h, first)
	var live bool
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(
		"SELECT expires_at > now() FROM /* schema */idempotency_keys WHERE key = 'k'")).Scan(&live))
	if live { // else the machine is too slow to see the key before it expires
		require.True(t, again.replayed())
	}
	var got reply
	require.Eventually(t, func() bool {
		got = send(h, other)
		return got.Status != http.StatusUnprocessableEntity
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, http.StatusCreated, got.Status)
	require.False(t, got.replayed())
	require.Equal(t, "/charges/2", got.Header.Get("Location"))
	require.EqualValues(t, 2, runs.Load())
	require.Equal(t, 1, b.row(t, "k").Attempts, "a restarted key starts counting afresh")
	require.True(t, send(h, other).replayed())
	require.Equal(t, http.StatusUnprocessableEntity, send(h, first).Status, "the key now names the other request")
}

func TestDeleteExpiredWorksInBoundedBatches(t *testing.T) {
	t.Parallel()
	m, b := setup(t, idempotency.Config{})
	var batches []int64
	idempotency.SetCleanupBatch(m, 100, func(n int64) { batches = append(batches, n) })

	insert := func(n int, prefix, state, expires, lockedUntil string) {
		b.exec(t, `INSERT INTO /* schema */idempotency_keys
			(route, key, fingerprint, state, lock_token, locked_until, status, headers, body, expires_at)
			SELECT 'POST /charges', $1 || i, '\x00', $2,
			       CASE WHEN $2 = 'in_progress' THEN 1 END, now() + $4::interval,
			       CASE WHEN $2 = 'done' THEN 201 END, CASE WHEN $2 = 'done' THEN '{}'::jsonb END, CASE WHEN $2 = 'done' THEN '\x'::bytea END,
			       now() + $3::interval
			FROM generate_series(1, $5) AS i`, prefix, state, expires, lockedUntil, n)
	}
	insert(250, "expired-", "done", "-1 minute", "0")
	insert(1, "crashed-long-ago-", "in_progress", "-1 minute", "-1 minute")
	insert(5, "live-", "done", "1 hour", "0")
	insert(1, "expired-but-leased-", "in_progress", "-1 minute", "1 minute")

	deleted, err := m.DeleteExpired(context.Background())
	require.NoError(t, err)
	require.Equal(t, 251, deleted)
	require.Equal(t, []int64{100, 100, 51}, batches, "100 keys per statement, until a batch comes back short")

	var left []string
	rows, err := b.pool.Query(context.Background(), b.sql("SELECT key FROM /* schema */idempotency_keys ORDER BY key"))
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		left = append(left, k)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"expired-but-leased-1", "live-1", "live-2", "live-3", "live-4", "live-5"}, left)

	batches = nil
	deleted, err = m.DeleteExpired(context.Background())
	require.NoError(t, err)
	require.Zero(t, deleted)
	require.Equal(t, []int64{0}, batches)
}

func TestDeleteExpiredExplainsAnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	m, err := idempotency.New(pgtest.Pool(t), idempotency.Config{Schema: pgtest.EmptySchema(t)})
	require.NoError(t, err)
	_, err = m.DeleteExpired(context.Background())
	require.ErrorContains(t, err, "idempotency: delete expired keys: ")
	require.ErrorContains(t, err, "run inboxctl migrate up")
}
