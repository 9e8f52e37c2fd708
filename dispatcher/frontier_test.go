package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// A message that turns pending behind the claims' frontier is still
// handled: received in a transaction that began before the messages the
// claims have since taken, it is found by the next claim that reads the
// pending index from its start. With claims that never did, it would wait
// for ever.
func TestALateMessageIsClaimedByAFullClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := b.newDispatcher(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
	})
	dispatcher.SetFrontier(d, 0, 300*time.Millisecond)
	require.NoError(t, d.Start(ctx))

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = b.inbox.ReceiveTx(ctx, tx, inbox.Message{ID: "late", EventType: "OrderPlaced", Payload: []byte("late")})
	require.NoError(t, err)
	// Messages received after the late one's transaction began, and
	// handled: the frontier is past its available_at.
	b.receive(t, "early-1")
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */effects WHERE message_id = 'early-1')")
	b.receive(t, "early-2")
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */effects WHERE message_id = 'early-2')")
	var late, early time.Time
	require.NoError(t, tx.QueryRow(ctx, b.sql("SELECT available_at FROM /* schema */inbox WHERE message_id = 'late'")).Scan(&late))
	b.scalar(t, &early, "SELECT available_at FROM /* schema */inbox WHERE message_id = 'early-1'")
	require.True(t, late.Before(early), "the late message (%s) is older than the ones handled (%s)", late, early)
	require.NoError(t, tx.Commit(ctx))

	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM /* schema */effects WHERE message_id = 'late')")
	require.Equal(t, map[string]int{"early-1": 1, "early-2": 1, "late": 1}, b.effects(t))
}

// The claims' frontier stays behind a transaction still open, so that its
// message, older than the ones handled meanwhile, is handled once
// committed without waiting for a full claim (none comes within the hour
// here); and once no transaction that old is open, the frontier moves up
// to the messages claimed, however wide the margin allowed (an hour).
func TestTheFrontierWaitsForOpenTransactionsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := b.newDispatcher(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
	})
	dispatcher.SetFrontier(d, time.Hour, time.Hour)
	require.NoError(t, d.Start(ctx))
	handled := func(id string) {
		b.waitFor(t, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM /* schema */effects WHERE message_id = '%s')", id))
	}

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = b.inbox.ReceiveTx(ctx, tx, inbox.Message{ID: "late", EventType: "OrderPlaced", Payload: []byte("late")})
	require.NoError(t, err)
	var late time.Time
	require.NoError(t, tx.QueryRow(ctx, "SELECT now()").Scan(&late))
	b.receive(t, "early")
	handled("early")
	from := dispatcher.NextClaimFrom(d)
	require.NotNil(t, from)
	require.False(t, from.After(late), "the frontier (%s) is behind the transaction still open (%s)", from, late)
	require.NoError(t, tx.Commit(ctx))
	handled("late")

	b.receive(t, "last")
	handled("last")
	var last time.Time
	b.scalar(t, &last, "SELECT available_at FROM /* schema */inbox WHERE message_id = 'last'")
	from = dispatcher.NextClaimFrom(d)
	require.NotNil(t, from)
	require.False(t, from.After(last), "the frontier (%s) is not past the message claimed (%s)", from, last)
	// Other tests' transactions in the database may hold it back, but not
	// for anything like the margin.
	require.True(t, from.After(last.Add(-10*time.Minute)), "the frontier (%s) stays the margin behind the message claimed (%s)", from, last)
}

// An ordering key's backlog, older than the frontier, is not held back by
// it: each of the key's messages becomes claimable only when the one
// before it is done, by which time the claims of other messages have moved
// the frontier past it. With claims that read from the start only once
// (the full-claim interval is an hour here), the key's messages, received
// an hour ago, must still all be handled, by handlers in the batch
// transaction or leased: the dispatcher rewinds the frontier to each
// finished keyed message's received_at.
func TestAKeyedBacklogBehindTheFrontierIsHandled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		handler func(b *testBundle) dispatcher.Handler
	}{
		{"in the transaction", func(b *testBundle) dispatcher.Handler { return dispatcher.InTx(b.recordEffect) }},
		{"leased", func(*testBundle) dispatcher.Handler {
			return dispatcher.Leased(func(context.Context, *dispatcher.Message) error { return nil })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			var keyed []inbox.Message
			for i := range 20 {
				keyed = append(keyed, inbox.Message{ID: fmt.Sprintf("k-%02d", i), EventType: "OrderPlaced", Payload: []byte("k"), OrderingKey: "order-7"})
			}
			b.receiveMsgs(t, keyed...)
			b.exec(t, "UPDATE /* schema */inbox SET received_at = now() - interval '1 hour', available_at = now() - interval '1 hour'")
			b.receive(t, ids("other", 2000)...)

			d := b.newDispatcher(t, dispatcher.Config{
				Handlers:  map[string]dispatcher.Handler{"OrderPlaced": tc.handler(b)},
				Workers:   4,
				BatchSize: 10,
			})
			dispatcher.SetFrontier(d, 0, time.Hour)
			require.NoError(t, d.Start(ctx))
			// 2,020 messages: leased, through PgBouncer, 13 s on an idle
			// machine, and past 30 s in a loaded make test. Were the
			// keyed ones held back, they would never be handled at all.
			b.waitForWithin(t, 2*time.Minute, settledSQL)
		})
	}
}

// A consumer whose messages all have ordering keys still claims from the
// frontier: after a batch of keyed messages, the next claim starts at the
// earliest one's received_at, less the margin, instead of at the pending
// index's start, which would read the entry of every message claimed since
// the partition was last vacuumed. Here 40 keys of 5 messages each are
// handled, with full claims once an hour: only the first claims, before
// any message was taken, read from the start.
func TestKeyedMessagesKeepTheClaimsAtTheFrontier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var msgs []inbox.Message
	for i := range 200 {
		msgs = append(msgs, inbox.Message{ID: fmt.Sprintf("m-%03d", i), EventType: "OrderPlaced", Payload: []byte("k"),
			OrderingKey: fmt.Sprintf("order-%d", i%40)})
	}
	b.receiveMsgs(t, msgs...)

	claims := pgtest.NewFullClaims("coalesce($8::timestamptz", 7)
	b.pool = pgtest.TracedPool(t, b.pool, claims.Tracer())
	const workers = 2
	d := b.newDispatcher(t, dispatcher.Config{
		Handlers:  map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
		Workers:   workers,
		BatchSize: 10,
	})
	dispatcher.SetFrontier(d, 0, time.Hour)
	require.NoError(t, d.Start(ctx))
	b.waitSettled(t)
	require.Len(t, b.effects(t), 200)
	claims.RequireAtMost(t, 20, workers) // 200 messages in batches of 10
}
