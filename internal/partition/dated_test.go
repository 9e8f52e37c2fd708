package partition_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/partition"
)

// receiveAt stores a message with id, dated by at (inbox.Message.IDTime),
// failing the test on an error but a conflict, and returns its outcome.
func (b *testBundle) receiveAt(t *testing.T, id string, at time.Time, payload string) inbox.Outcome {
	t.Helper()
	o, err := b.inbox.Receive(context.Background(), inbox.Message{ID: id, IDTime: at, EventType: "E", Payload: []byte(payload)})
	if err != nil {
		require.ErrorIs(t, err, inbox.ErrPayloadConflict)
	}
	return o
}

// A foreign id (no UUIDv7) with an IDTime goes to the partition of that
// time's day, or the default one while the day has none; a UUIDv7 goes to
// its own day whatever IDTime it carries (a relay republishes it with a
// new broker time); without an IDTime a foreign id is undated.
func TestDatedForeignIDsLandInTheirDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	today := b.today(t)
	v7 := partition.IDAt(today.Time().Add(time.Hour)).String()
	cases := []struct {
		id   string
		at   time.Time
		want string
	}{
		{"sqs-today", today.Time().Add(23 * time.Hour), "inbox_d" + today.String()},
		{"sqs-future", (today + 10).Time(), "inbox_default"},
		{"sqs-undated", time.Time{}, "inbox_g0"},
		{v7, (today + 1).Time(), "inbox_d" + today.String()},
	}
	for _, c := range cases {
		require.Equal(t, inbox.Accepted, b.receiveAt(t, c.id, c.at, "p"), c.id)
		require.Equal(t, c.want, b.where(t, c.id), c.id)
	}
	res, err := b.inbox.ReceiveBatch(ctx, []inbox.Message{
		{ID: "kafka-0", IDTime: today.Time(), EventType: "E"},
		{ID: partition.IDAt(today.Time()).String(), EventType: "E"},
		{ID: "kafka-1", EventType: "E"},
		{ID: "sqs-today", IDTime: today.Time().Add(23 * time.Hour), EventType: "E", Payload: []byte("p")},
	})
	require.NoError(t, err)
	for i, want := range []inbox.Outcome{inbox.Accepted, inbox.Accepted, inbox.Accepted, inbox.Duplicate} {
		require.NoError(t, res[i].Err)
		require.Equal(t, want, res[i].Outcome, i)
	}
	require.Equal(t, "inbox_d"+today.String(), b.where(t, "kafka-0"))
	require.Equal(t, "inbox_g0", b.where(t, "kafka-1"))

	_, err = b.inbox.Receive(ctx, inbox.Message{ID: "sqs-epoch", IDTime: time.Unix(3600, 0), EventType: "E"})
	require.ErrorIs(t, err, inbox.ErrInvalidMessage)
	require.Contains(t, err.Error(), "IDTime")
	require.Empty(t, b.where(t, "sqs-epoch"))
}

// A dated foreign id has one partition, for ever: a redelivery days later,
// generations later, or after its day's partition was made and its row
// moved there from the default one, is a duplicate, and a changed payload
// a conflict, by Receive and by ReceiveBatch.
func TestARedeliveryDaysLaterFindsTheDatedForeignID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	today := b.today(t)
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, today-3, time.Second))
	old, future := (today - 3).Time().Add(5*time.Hour), (today + 10).Time().Add(time.Minute)
	require.Equal(t, inbox.Accepted, b.receiveAt(t, "sqs-old", old, "first"))
	require.Equal(t, inbox.Accepted, b.receiveAt(t, "sqs-future", future, "first"))
	require.Equal(t, "inbox_d"+(today-3).String(), b.where(t, "sqs-old"))

	for g := int32(0); g < 2; g++ {
		require.NoError(t, partition.StartGeneration(ctx, b.pool, b.schema, g, time.Second))
	}
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, today+10, time.Second))
	require.Equal(t, "inbox_d"+(today+10).String(), b.where(t, "sqs-future"), "moved out of the default partition")

	for id, at := range map[string]time.Time{"sqs-old": old, "sqs-future": future} {
		require.Equal(t, inbox.Duplicate, b.receiveAt(t, id, at, "first"), id)
		require.Equal(t, inbox.Conflict, b.receiveAt(t, id, at, "changed"), id)
	}
	res, err := b.inbox.ReceiveBatch(ctx, []inbox.Message{
		{ID: "sqs-old", IDTime: old, EventType: "E", Payload: []byte("first")},
		{ID: "sqs-new", IDTime: old, EventType: "E", Payload: []byte("new")},
		{ID: "sqs-future", IDTime: future, EventType: "E", Payload: []byte("changed"), OrderingKey: "k"},
	})
	require.NoError(t, err)
	require.Equal(t, inbox.Duplicate, res[0].Outcome)
	require.Equal(t, inbox.Accepted, res[1].Outcome)
	require.Equal(t, inbox.Conflict, res[2].Outcome)
	require.Equal(t, "inbox_d"+(today-3).String(), b.where(t, "sqs-new"))
	b.requireStoredOnce(t)
}

// A redelivery whose IDTime is off from the first delivery's by less than
// a day (a producer's clock, a retry that re-stamped it), across a day's
// boundary either way, finds the first delivery in the neighbouring day's
// partition: a duplicate, or a conflict. Two days off, it is another
// message (docs/design.md, "Dated foreign ids": the promise is the
// caller's). Also at REPEATABLE READ, which a dated id may use.
func TestAnIDTimeOffByLessThanADayStillFindsTheFirstDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	today := b.today(t)
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, today-1, time.Second))
	late := today.Time().Add(-time.Hour) // yesterday, 23:00
	early := today.Time().Add(time.Hour) // today, 01:00

	require.Equal(t, inbox.Accepted, b.receiveAt(t, "late", late, "p"))
	require.Equal(t, inbox.Duplicate, b.receiveAt(t, "late", early, "p"), "a day later")
	require.Equal(t, inbox.Conflict, b.receiveAt(t, "late", late.Add(23*time.Hour), "changed"))
	require.Equal(t, inbox.Accepted, b.receiveAt(t, "early", early, "p"))
	res, err := b.inbox.ReceiveBatch(ctx, []inbox.Message{
		{ID: "early", IDTime: late, EventType: "E", Payload: []byte("p")},
		{ID: "late", IDTime: early, EventType: "E", Payload: []byte("p")},
	})
	require.NoError(t, err)
	require.Equal(t, []inbox.Result{{Outcome: inbox.Duplicate}, {Outcome: inbox.Duplicate}}, res)
	require.NoError(t, pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		o, err := b.inbox.ReceiveTx(ctx, tx, inbox.Message{ID: "early", IDTime: late, EventType: "E", Payload: []byte("p")})
		require.Equal(t, inbox.Duplicate, o)
		return err
	}))
	require.Equal(t, "inbox_d"+(today-1).String(), b.where(t, "late"))
	require.Equal(t, "inbox_d"+today.String(), b.where(t, "early"))
	b.requireStoredOnce(t)

	require.Equal(t, inbox.Accepted, b.receiveAt(t, "late", late.Add(48*time.Hour), "p"), "two days off: another message")
}

// A producer that starts sending IDTimes (an inbox upgraded to version 11,
// a subscriber given an IDTimeFunc) redelivers messages first received
// undated, kept in the generations: each is found there, a duplicate,
// and not stored again in its day.
func TestAnUndatedFirstDeliveryIsFoundByItsDatedRedelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	now := b.today(t).Time().Add(time.Hour)
	for _, id := range []string{"sqs-1", "sqs-2", "sqs-3"} {
		require.Equal(t, inbox.Accepted, b.receiveAt(t, id, time.Time{}, "p"), id)
	}
	require.NoError(t, partition.StartGeneration(ctx, b.pool, b.schema, 0, time.Second))
	require.Equal(t, inbox.Accepted, b.receiveAt(t, "sqs-4", time.Time{}, "p"))

	require.Equal(t, inbox.Duplicate, b.receiveAt(t, "sqs-1", now, "p"))
	require.Equal(t, inbox.Conflict, b.receiveAt(t, "sqs-2", now, "changed"))
	res, err := b.inbox.ReceiveBatch(ctx, []inbox.Message{
		{ID: "sqs-3", IDTime: now, EventType: "E", Payload: []byte("p")},
		{ID: "sqs-4", IDTime: now, EventType: "E", Payload: []byte("p")},
		{ID: "sqs-5", IDTime: now, EventType: "E", Payload: []byte("p")},
	})
	require.NoError(t, err)
	require.Equal(t, []inbox.Result{{Outcome: inbox.Duplicate}, {Outcome: inbox.Duplicate}, {Outcome: inbox.Accepted}}, res)
	require.Equal(t, "inbox_g0", b.where(t, "sqs-1"))
	require.Equal(t, "inbox_g1", b.where(t, "sqs-4"))
	require.Equal(t, "inbox_d"+b.today(t).String(), b.where(t, "sqs-5"))
	b.requireStoredOnce(t)
}

// Retention drops a day's dated foreign ids with their day, one DROP
// TABLE; those not done move to the default partition, keeping their
// bucket, where their redeliveries find them.
func TestDatedForeignIDsAreDroppedWithTheirDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.today(t) - 9
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, old, time.Second))
	at := old.Time().Add(time.Hour)
	for _, id := range []string{"done-1", "done-2", "dead-1", "pending-1"} {
		require.Equal(t, inbox.Accepted, b.receiveAt(t, id, at, "p"), id)
	}
	b.exec(t, `UPDATE /* schema */inbox SET status = CASE WHEN message_id LIKE 'done-%' THEN 'done' ELSE split_part(message_id, '-', 1) END,
	           processed_at = CASE WHEN message_id LIKE 'done-%' THEN now() - interval '8 days' END`)

	r := b.maintain(t, partition.Options{InboxRetention: 7 * 24 * time.Hour, OutboxRetention: 7 * 24 * time.Hour})
	require.Contains(t, r.Dropped, "inbox_d"+old.String())
	require.EqualValues(t, 2, r.Kept)
	for _, id := range []string{"done-1", "done-2"} {
		require.Empty(t, b.where(t, id), id)
	}
	for _, id := range []string{"dead-1", "pending-1"} {
		require.Equal(t, "inbox_default", b.where(t, id), id)
		require.Equal(t, inbox.Duplicate, b.receiveAt(t, id, at, "p"), id)
		require.Equal(t, inbox.Duplicate, b.receiveAt(t, id, at.Add(-2*time.Hour), "p"), id)
	}
	b.requireStoredOnce(t)
}

// Many receivers deliver the same foreign ids, each dated by one IDTime
// (the promise kept), by Receive, ReceiveBatch and ReceiveTx, on either
// side of a day's boundary: each is stored once, in its day.
func TestConcurrentDuplicatesOfDatedForeignIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	today := b.today(t)
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, today-1, time.Second))
	const ids, receivers = 100, 4
	at := func(k int) time.Time { return today.Time().Add(time.Duration(k-ids/2) * time.Minute) }
	accepted := make([]int, ids)
	results := make(chan [2]int, ids*receivers)
	errs := make(chan error, receivers)
	for r := range receivers {
		go func() {
			errs <- func() error {
				for k := range ids {
					k := (k + r*ids/receivers) % ids
					m := inbox.Message{ID: fmt.Sprintf("sqs-%d", k), IDTime: at(k), EventType: "E", Payload: []byte("p")}
					var o inbox.Outcome
					var err error
					switch r % 3 {
					case 0:
						o, err = b.inbox.Receive(ctx, m)
					case 1:
						var res []inbox.Result
						if res, err = b.inbox.ReceiveBatch(ctx, []inbox.Message{m, {ID: "other", IDTime: at(0), EventType: "E"}}); err == nil {
							o = res[0].Outcome
						}
					default:
						err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
							o, err = b.inbox.ReceiveTx(ctx, tx, m)
							return err
						})
					}
					if err != nil {
						return err
					}
					results <- [2]int{k, int(o)}
				}
				return nil
			}()
		}()
	}
	for range receivers {
		require.NoError(t, <-errs)
	}
	close(results)
	for r := range results {
		if inbox.Outcome(r[1]) == inbox.Accepted {
			accepted[r[0]]++
		}
	}
	for k, n := range accepted {
		require.Equal(t, 1, n, k)
		require.Equal(t, "inbox_d"+partition.DayOf(at(k)).String(), b.where(t, fmt.Sprintf("sqs-%d", k)))
	}
	b.requireStoredOnce(t)
}
