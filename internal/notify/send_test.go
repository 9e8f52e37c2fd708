package notify_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/notify"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A notification sent on its own is delivered, and its transaction commits
// asynchronously, so it never holds PostgreSQL's notification lock through
// a WAL flush that other notifying commits then queue behind.
func TestSendNotifiesWithAnAsynchronousCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	channel := fmt.Sprintf("pgbox_test_send_%d", rand.Int64())

	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN "`+channel+`"`)
	require.NoError(t, err)
	defer func() { _, _ = listener.Exec(context.WithoutCancel(ctx), `UNLISTEN "`+channel+`"`) }()

	require.NoError(t, notify.Send(ctx, pool, channel, "payload"))
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(waitCtx)
	require.NoError(t, err)
	require.Equal(t, channel, n.Channel)
	require.Equal(t, "payload", n.Payload)

	// The statement's own transaction is the one that commits
	// asynchronously, and only it: run it inside one to look.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var before, during, after string
	require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&before))
	_, err = tx.Exec(ctx, notify.SendSQL, channel, "")
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&during))
	require.Equal(t, "off", during)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&after))
	require.Equal(t, before, after, "the setting must not outlive the statement's transaction")
}
