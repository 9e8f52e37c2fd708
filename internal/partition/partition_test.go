package partition_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/partition"
)

// The Go and SQL readings of an id's day agree on every kind of id:
// canonical UUIDv7s of any time, and everything that is not one.
func TestIDDayAgreesWithSQL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v7 := partition.IDAt(time.Date(2026, 11, 24, 23, 59, 59, 999e6, time.UTC)).String()
	ids := []string{
		v7, strings.ToUpper(v7), uuid.NewString(), "order-17/placed", "", "{" + v7 + "}",
		v7[:14] + "6" + v7[15:], v7[:19] + "c" + v7[20:], v7[:8] + "x" + v7[9:], "0190zzzz" + v7[8:], v7 + "0",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		ids = append(ids, partition.IDAt(time.UnixMilli(rng.Int64N(4102444800000))).String()) // 1970 to 2100
	}
	for _, id := range ids {
		var sql *int32
		require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT /* schema */uuidv7_day($1::text)"), id).Scan(&sql))
		day, ok := partition.IDDay(id)
		if sql == nil {
			require.False(t, ok, "Go dates %q, SQL does not", id)
			continue
		}
		require.True(t, ok, "SQL dates %q, Go does not", id)
		require.Equal(t, *sql, int32(day), id)
		if u, err := uuid.Parse(id); err == nil && id == u.String() {
			uday, ok := partition.UUIDDay(u)
			require.True(t, ok, id)
			require.Equal(t, day, uday, id)
		}
	}
	require.Equal(t, "20261124", func() string { d, _ := partition.IDDay(v7); return d.String() }())
}

// Every id lands where the bucket rule puts it: a UUIDv7 in its day's
// partition, or the default one while its day has none; anything else in
// the current generation.
func TestEachIDLandsInItsPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	today := b.today(t)
	cases := map[string]string{
		partition.IDAt(today.Time().Add(time.Hour)).String():                 "inbox_d" + today.String(),
		partition.IDAt((today + 10).Time()).String():                         "inbox_default",
		partition.IDAt(time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC)).String(): "inbox_default",
		"order-1": "inbox_g0",
		strings.ToUpper(partition.IDAt(today.Time()).String()): "inbox_g0",
	}
	for id, want := range cases {
		require.Equal(t, inbox.Accepted, b.receive(t, id, "x"), id)
		require.Equal(t, want, b.where(t, id), id)
	}
}

// A redelivery is a duplicate, and a changed payload a conflict, wherever
// the first delivery is: in a day's partition days later, in an earlier
// generation, or moved into a new day's partition from the default one.
func TestRedeliveriesFindTheFirstDeliveryInAnyPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	today := b.today(t)
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, today-3, time.Second))

	old := partition.IDAt((today - 3).Time().Add(5 * time.Hour)).String()
	future := partition.IDAt((today + 10).Time()).String()
	for _, id := range []string{old, future, "undated-1"} {
		require.Equal(t, inbox.Accepted, b.receive(t, id, "first"), id)
	}
	require.Equal(t, "inbox_d"+(today-3).String(), b.where(t, old))
	require.Equal(t, "inbox_default", b.where(t, future))

	for g := int32(0); g < 2; g++ { // undated-1 is now two generations back
		require.NoError(t, partition.StartGeneration(ctx, b.pool, b.schema, g, time.Second))
	}
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, today+10, time.Second))
	require.Equal(t, "inbox_d"+(today+10).String(), b.where(t, future), "moved out of the default partition")

	for _, id := range []string{old, future, "undated-1"} {
		require.Equal(t, inbox.Duplicate, b.receive(t, id, "first"), id)
		require.Equal(t, inbox.Conflict, b.receive(t, id, "changed"), id)
	}
	res, err := b.inbox.ReceiveBatch(ctx, []inbox.Message{
		{ID: "undated-1", EventType: "E", Payload: []byte("first")},
		{ID: "undated-2", EventType: "E", Payload: []byte("new")},
		{ID: old, EventType: "E", Payload: []byte("changed")},
	})
	require.NoError(t, err)
	require.Equal(t, inbox.Duplicate, res[0].Outcome)
	require.Equal(t, inbox.Accepted, res[1].Outcome)
	require.Equal(t, inbox.Conflict, res[2].Outcome)
	require.Equal(t, "inbox_g0", b.where(t, "undated-1"))
	require.Equal(t, "inbox_g2", b.where(t, "undated-2"))
	b.requireStoredOnce(t)
}

// Many receivers deliver the same undated ids at once, by Receive,
// ReceiveBatch and ReceiveTx, while generations keep changing under them:
// each id is stored once, and reported Accepted once. A receive that read
// the generation without holding the partitioning table's lock, or looked
// in the earlier generations with a snapshot taken before that lock,
// would store some in two generations.
func TestConcurrentDuplicatesStraddlingGenerationSwitches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const ids, receivers = 300, 6
	var accepted [ids]atomic.Int32
	// A new generation every chunksPerFlip chunks received: a few dozen in
	// all, each one under way while receives are. (A switcher in a tight
	// loop made hundreds, and every undated receive looks in each.)
	const chunksPerFlip = 12
	var chunks, flips atomic.Int32
	tick, done := make(chan struct{}, 1), make(chan struct{})
	var switcher sync.WaitGroup
	switcher.Go(func() {
		for g := int32(0); ; {
			select {
			case <-done:
				return
			case <-tick:
			}
			err := partition.StartGeneration(ctx, b.pool, b.schema, g, 200*time.Millisecond)
			if errors.Is(err, partition.ErrLockTimeout) {
				continue
			}
			if err != nil {
				t.Error(err)
				return
			}
			g++
			flips.Add(1)
		}
	})

	var wg sync.WaitGroup
	for r := range receivers {
		wg.Go(func() {
			// Every receiver goes through the ids in the same order, in
			// chunks of its own sizes, so that each id's deliveries run
			// at about the same time, across the switches.
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			order := make([]int, ids)
			for k := range order {
				order[k] = k
			}
			for len(order) > 0 {
				n := min(1+rng.IntN(8), len(order))
				chunk := order[:n]
				order = order[n:]
				msgs := make([]inbox.Message, n)
				for i, k := range chunk {
					msgs[i] = inbox.Message{ID: fmt.Sprintf("u-%d", k), EventType: "E", Payload: []byte("p")}
				}
				var res []inbox.Result
				var err error
				switch r % 3 {
				case 0:
					res, err = b.inbox.ReceiveBatch(ctx, msgs)
				case 1:
					for _, m := range msgs {
						var o inbox.Outcome
						if o, err = b.inbox.Receive(ctx, m); err != nil {
							break
						}
						res = append(res, inbox.Result{Outcome: o})
					}
				default:
					err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
						res, err = b.inbox.ReceiveBatchTx(ctx, tx, msgs)
						return err
					})
				}
				if err != nil {
					t.Error(err)
					return
				}
				for i, k := range chunk {
					if res[i].Outcome == inbox.Accepted {
						accepted[k].Add(1)
					}
				}
				if chunks.Add(1)%chunksPerFlip == 0 {
					select {
					case tick <- struct{}{}:
					default: // a switch is due already
					}
				}
			}
		})
	}
	wg.Wait()
	close(done)
	switcher.Wait()

	require.Greater(t, flips.Load(), int32(3), "the generation changed while the receivers ran")
	b.requireStoredOnce(t)
	for k := range accepted {
		require.EqualValues(t, 1, accepted[k].Load(), "u-%d", k)
	}
}

// Many receivers deliver the same ids of a day that has no partition yet
// (they wait in the default partition) while the day's partition is made
// and they are moved into it: each id is stored once. A delivery caught
// mid-move fails (its row no longer fits the default partition) and, like a
// broker's redelivery, is tried again.
func TestConcurrentDuplicatesWhileTheirDaysPartitionIsMade(t *testing.T) {
	t.Parallel()
	// The ids are UUIDv7s of the day, or foreign ids dated by an IDTime
	// of the day (inbox.Message.IDTime).
	for name, message := range map[string]func(day partition.Day, k int) inbox.Message{
		"UUIDv7": func(day partition.Day, k int) inbox.Message {
			return inbox.Message{ID: partition.IDAt(day.Time().Add(time.Duration(k) * time.Second)).String(), EventType: "E", Payload: []byte("p")}
		},
		"dated foreign": func(day partition.Day, k int) inbox.Message {
			return inbox.Message{ID: fmt.Sprintf("sqs-%d", k), IDTime: day.Time().Add(time.Duration(k) * time.Second), EventType: "E", Payload: []byte("p")}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			concurrentDuplicatesWhileTheirDaysPartitionIsMade(t, message)
		})
	}
}

func concurrentDuplicatesWhileTheirDaysPartitionIsMade(t *testing.T, message func(day partition.Day, k int) inbox.Message) {
	ctx := context.Background()
	b := setup(t)
	day := b.today(t) + 5
	const ids, receivers = 200, 4
	msgOf := make([]inbox.Message, ids)
	for k := range msgOf {
		msgOf[k] = message(day, k)
	}
	var accepted [ids]atomic.Int32
	var stored atomic.Int32
	var wg sync.WaitGroup
	for r := range receivers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for _, k := range rng.Perm(ids) {
				for attempt := 0; ; attempt++ {
					o, err := b.inbox.Receive(ctx, msgOf[k])
					if err == nil {
						if o == inbox.Accepted {
							accepted[k].Add(1)
							stored.Add(1)
						}
						break
					}
					if attempt == 10 || !strings.Contains(err.Error(), "violates partition constraint") {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	for stored.Load() < ids/3 { // make the partition while they run
		time.Sleep(time.Millisecond)
	}
	for {
		err := partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, day, 200*time.Millisecond)
		if !errors.Is(err, partition.ErrLockTimeout) {
			require.NoError(t, err)
			break
		}
	}
	wg.Wait()

	b.requireStoredOnce(t)
	for k := range accepted {
		require.EqualValues(t, 1, accepted[k].Load(), msgOf[k].ID)
		require.Equal(t, "inbox_d"+day.String(), b.where(t, msgOf[k].ID))
	}
}

// Retention drops a partition whose done rows are all past the window, a
// day's or a generation's, with one DROP TABLE however many rows it holds;
// the rows that are not done (pending, running, dead, discarded, and the
// outbox's dead and unpublished) move to where their bucket now goes, and
// redeliveries still find them. Recent partitions stay.
func TestExpiredPartitionsAreDroppedAndTheirUnfinishedRowsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	today := b.today(t)
	old, recent := today-9, today-1
	for _, d := range []partition.Day{old, recent} {
		require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, d, time.Second))
	}
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Outbox, old, time.Second))

	at := func(d partition.Day, k int) string {
		return partition.IDAt(d.Time().Add(time.Duration(k) * time.Millisecond)).String()
	}
	insert := `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
		VALUES ('payments', $1, 'E', $2, 1, 3, sha256('p'), 'p', CASE WHEN $2 = 'done' THEN now() - $3 * interval '1 day' END, /* schema */inbox_bucket($1))`
	for k := range 500 {
		b.exec(t, insert, at(old, k), "done", 8)
	}
	unfinished := map[string]string{}
	for k, status := range []string{"dead", "discarded", "pending", "running"} {
		id := at(old, 1000+k)
		b.exec(t, insert, id, status, 0)
		unfinished[id] = status
	}
	recentID := at(recent, 1)
	b.exec(t, insert, recentID, "done", 1)
	b.exec(t, insert, "undated-old", "done", 8)
	b.exec(t, insert, "undated-dead", "dead", 0)
	b.exec(t, "UPDATE /* schema */partitioning SET generation_started_at = now() - interval '8 days' WHERE table_name = 'inbox'")
	b.exec(t, `
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, published_at, bucket)
		SELECT r.id, 't', 'E', '', r.status, CASE WHEN r.status = 'published' THEN now() - interval '8 days' END, /* schema */outbox_bucket(r.id)
		FROM unnest($1::uuid[], $2::text[]) AS r(id, status)`,
		[]string{at(old, 1), at(old, 2), at(old, 3)}, []string{"published", "dead", "pending"})

	r := b.maintain(t, partition.Options{InboxRetention: 7 * 24 * time.Hour, OutboxRetention: 7 * 24 * time.Hour, GenerationPeriod: 7 * 24 * time.Hour})
	require.ElementsMatch(t, []string{"inbox_d" + old.String(), "inbox_g0", "outbox_d" + old.String()}, r.Dropped)
	require.EqualValues(t, 1, r.Generation)
	require.EqualValues(t, 4+1+2, r.Kept)
	require.Empty(t, r.Postponed)

	var doneLeft int
	require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT count(*) FROM /* schema */inbox WHERE status = 'done'")).Scan(&doneLeft))
	require.Equal(t, 1, doneLeft, "the recent one")
	require.Equal(t, "inbox_d"+recent.String(), b.where(t, recentID))
	for id, status := range unfinished {
		require.Equal(t, "inbox_default", b.where(t, id), status)
		require.Equal(t, inbox.Duplicate, b.receive(t, id, "p"), status)
	}
	require.Equal(t, "inbox_g1", b.where(t, "undated-dead"))
	require.Equal(t, inbox.Duplicate, b.receive(t, "undated-dead", "p"))
	var outboxLeft []string
	rows, err := b.pool.Query(ctx, b.sql(`
		SELECT o.status || ' in ' || c.relname FROM /* schema */outbox AS o JOIN pg_catalog.pg_class AS c ON c.oid = o.tableoid ORDER BY 1`))
	require.NoError(t, err)
	outboxLeft, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"dead in outbox_default", "pending in outbox_default"}, outboxLeft)
	b.requireStoredOnce(t)
}

// A change to the partitions waits for its locks no longer than its lock
// timeout: with a transaction holding the inbox (a slow handler's batch, a
// long report), the drop is postponed and Maintain returns at once,
// without holding receives up behind it; once that transaction ends, the
// next run drops the partition. So with a generation switch, held up by
// a receive of an undated id in an open transaction.
func TestChangesWaitNoLongerThanTheirLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.today(t) - 9
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, old, time.Second))
	b.exec(t, "UPDATE /* schema */partitioning SET generation_started_at = now() - interval '8 days' WHERE table_name = 'inbox'")

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = b.inbox.ReceiveTx(ctx, tx, inbox.Message{ID: "held", EventType: "E"})
	require.NoError(t, err)

	opts := partition.Options{
		InboxRetention: 7 * 24 * time.Hour, OutboxRetention: -1, GenerationPeriod: 7 * 24 * time.Hour, LockTimeout: 100 * time.Millisecond,
	}
	r := b.maintain(t, opts)
	require.Empty(t, r.Dropped)
	require.Zero(t, r.Generation)
	require.ElementsMatch(t, []string{"inbox_d" + old.String(), "inbox_g1"}, r.Postponed)
	require.Equal(t, inbox.Accepted, b.receive(t, "not held up", "p"), "receives go on once the change gave up")

	require.NoError(t, tx.Commit(ctx))
	r = b.maintain(t, opts)
	require.ElementsMatch(t, []string{"inbox_d" + old.String(), "inbox_g0"}, r.Dropped, "generation 0 held only pending messages")
	require.EqualValues(t, 1, r.Generation)
	require.Empty(t, r.Postponed)
}

// A day without a partition (the maintenance job not running for days)
// never makes a receive fail: its messages wait in the default partition,
// and move to the day's partition when it is made, where redeliveries
// find them.
func TestAMissingPartitionNeverFailsAReceive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	today := b.today(t)
	name := "inbox_d" + today.String()
	b.exec(t, "ALTER TABLE /* schema */inbox DETACH PARTITION /* schema */"+name)
	b.exec(t, "DROP TABLE /* schema */"+name)

	id := partition.IDAt(time.Now()).String()
	require.Equal(t, inbox.Accepted, b.receive(t, id, "p"))
	require.Equal(t, "inbox_default", b.where(t, id))

	r := b.maintain(t, partition.Options{CreateOnly: true})
	require.Equal(t, []string{name}, r.Created)
	require.Equal(t, name, b.where(t, id))
	require.Equal(t, inbox.Duplicate, b.receive(t, id, "p"))
}

// An undated id received in a REPEATABLE READ transaction is refused with
// inbox.ErrNeedsReadCommitted, storing nothing: its lookup in the earlier
// generations would read the transaction's old snapshot. A UUIDv7 needs no
// lookup and is stored.
func TestUndatedReceiveOutsideReadCommittedIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rr := pgx.TxOptions{IsoLevel: pgx.RepeatableRead}

	err := pgx.BeginTxFunc(ctx, b.pool, rr, func(tx pgx.Tx) error {
		_, err := b.inbox.ReceiveTx(ctx, tx, inbox.Message{ID: "order-1", EventType: "E"})
		return err
	})
	require.ErrorIs(t, err, inbox.ErrNeedsReadCommitted)
	require.Contains(t, err.Error(), "READ COMMITTED")
	require.Empty(t, b.where(t, "order-1"))

	id := partition.IDAt(time.Now()).String()
	require.NoError(t, pgx.BeginTxFunc(ctx, b.pool, rr, func(tx pgx.Tx) error {
		o, err := b.inbox.ReceiveTx(ctx, tx, inbox.Message{ID: id, EventType: "E"})
		require.Equal(t, inbox.Accepted, o)
		return err
	}))
	require.NotEmpty(t, b.where(t, id))
}
