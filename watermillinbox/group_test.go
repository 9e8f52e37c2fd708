package watermillinbox

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// newGroup returns a group on an inbox of a fresh schema, and the schema.
func newGroup(t *testing.T) (*group, string) {
	t.Helper()
	schema := pgtest.Schema(t)
	in, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: "payments", Schema: schema})
	require.NoError(t, err)
	return &group{in: in}, schema
}

// lockInbox holds schema's inbox locked against inserts until the
// returned transaction ends.
func lockInbox(t *testing.T, schema string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	lock, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback(ctx) })
	_, err = lock.Exec(ctx, ident.Render("LOCK TABLE /* schema */inbox IN SHARE MODE", schema))
	require.NoError(t, err)
	return lock
}

// storedIDs returns the ids schema's inbox holds.
func storedIDs(t *testing.T, schema string) []string {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(context.Background(), ident.Render("SELECT message_id FROM /* schema */inbox", schema))
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// newMsg is a valid message with an id of its own.
func newMsg() inbox.Message {
	return inbox.Message{ID: uuid.NewString(), EventType: "E", Payload: []byte("{}")}
}

// Calls that arrive while a store is in flight are stored together in
// the next one, each with its own outcome: new, a conflicting repeat of
// an id within the group, invalid. Here the first store waits on a lock
// until every other call has queued behind it.
func TestCallsDuringAStoreAreStoredTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var stores atomic.Int32
	pool := pgtest.TracedPool(t, pgtest.Pool(t), pgtest.QueryArgs(func(sql string, _ []any) {
		if strings.Contains(sql, "INSERT INTO") && !strings.Contains(sql, "inbox_conflicts") {
			stores.Add(1)
		}
	}))
	schema := pgtest.Schema(t)
	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema})
	require.NoError(t, err)
	g := &group{in: in}

	lock := lockInbox(t, schema)

	msgs := make([]inbox.Message, 12)
	for i := range msgs {
		msgs[i] = inbox.Message{ID: uuid.NewString(), EventType: "OrderPlaced", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	msgs[5].EventType = ""                                              // invalid
	msgs[9].ID, msgs[9].Payload = msgs[3].ID, []byte(`{"n":"changed"}`) // a conflicting repeat of msgs[3]
	results := make([]chan inbox.Result, len(msgs))
	for i := range results {
		results[i] = make(chan inbox.Result, 1)
	}
	receive := func(i int) { go func() { results[i] <- g.receive(ctx, msgs[i]) }() }
	queued := func() int { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) }

	receive(0)
	require.Eventually(t, func() bool { return stores.Load() == 1 }, 10*time.Second, time.Millisecond, "the first store is sent")
	for i := 1; i < len(msgs); i++ { // one at a time, so the queue's order is the messages' order
		receive(i)
		require.Eventually(t, func() bool { return queued() == i }, 10*time.Second, time.Millisecond, "message %d waits behind the first store", i)
	}
	require.NoError(t, lock.Rollback(ctx))

	for i := range msgs {
		res := <-results[i]
		switch i {
		case 5:
			require.ErrorIs(t, res.Err, inbox.ErrInvalidMessage, "message %d", i)
		case 9:
			require.ErrorIs(t, res.Err, inbox.ErrPayloadConflict, "message %d", i)
			require.Equal(t, inbox.Conflict, res.Outcome)
		default:
			require.NoError(t, res.Err, "message %d", i)
			require.Equal(t, inbox.Accepted, res.Outcome, "message %d", i)
		}
	}
	require.EqualValues(t, 2, stores.Load(), "the first message alone, then the eleven behind it in one statement")
	var stored int
	require.NoError(t, pool.QueryRow(ctx, ident.Render("SELECT count(*) FROM /* schema */inbox", schema)).Scan(&stored))
	require.Equal(t, len(msgs)-2, stored)
	require.Zero(t, queued())
	g.mu.Lock()
	require.False(t, g.leading, "the lead is given up once nothing waits")
	g.mu.Unlock()
}

// A call whose context has ended by the time its group is stored gets
// the context's error, and its message is not stored; the others of the
// group are.
func TestACallGivenUpIsNotStored(t *testing.T) {
	t.Parallel()
	g, schema := newGroup(t)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	calls := []*call{
		{ctx: context.Background(), msg: newMsg(), lead: true, done: make(chan struct{})},
		{ctx: gone, msg: newMsg(), done: make(chan struct{})},
	}
	g.store(calls)
	<-calls[1].done
	require.NoError(t, calls[0].res.Err)
	require.ErrorIs(t, calls[1].res.Err, context.Canceled)
	require.Equal(t, []string{calls[0].msg.ID}, storedIDs(t, schema))
}

// A call whose context ends while it waits behind a store returns its
// context's error at once, and leaves the queue; the store in flight is
// not cut short by it, and the calls after it are stored.
func TestAWaitingCallGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, schema := newGroup(t)
	lock := lockInbox(t, schema)
	queued := func() int { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) }

	first, impatient, last := newMsg(), newMsg(), newMsg()
	firstDone, lastDone := make(chan inbox.Result, 1), make(chan inbox.Result, 1)
	go func() { firstDone <- g.receive(ctx, first) }()
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.leading && len(g.queue) == 0 }, 10*time.Second, time.Millisecond)
	short, cancel := context.WithCancel(ctx)
	impatientDone := make(chan inbox.Result, 1)
	go func() { impatientDone <- g.receive(short, impatient) }()
	require.Eventually(t, func() bool { return queued() == 1 }, 10*time.Second, time.Millisecond)
	go func() { lastDone <- g.receive(ctx, last) }()
	require.Eventually(t, func() bool { return queued() == 2 }, 10*time.Second, time.Millisecond)
	cancel()
	select {
	case res := <-impatientDone:
		require.ErrorIs(t, res.Err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("a call whose context ended still waits for the store ahead of it")
	}
	require.Equal(t, 1, queued(), "and leaves the queue")

	require.NoError(t, lock.Rollback(ctx))
	require.NoError(t, (<-firstDone).Err)
	require.NoError(t, (<-lastDone).Err)
	require.ElementsMatch(t, []string{first.ID, last.ID}, storedIDs(t, schema))
}

// A store that panics wakes every call of its group with an error, and
// gives the lead up: later calls are not left waiting for ever.
func TestAStoreThatPanicsLeavesNoCallWaiting(t *testing.T) {
	t.Parallel()
	g := &group{} // no inbox: ReceiveBatch panics
	ctx := context.Background()
	leader := &call{ctx: ctx, msg: inbox.Message{ID: "a"}, lead: true, done: make(chan struct{})}
	other := &call{ctx: ctx, msg: inbox.Message{ID: "b"}, done: make(chan struct{})}
	require.Panics(t, func() { g.store([]*call{leader, other}) })
	select {
	case <-other.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a call of the group was never woken")
	}
	require.ErrorContains(t, other.res.Err, "panicked")

	require.Panics(t, func() { g.receive(ctx, inbox.Message{ID: "c"}) })
	g.mu.Lock()
	defer g.mu.Unlock()
	require.False(t, g.leading, "the lead is given up")
}
