package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
)

func TestInTxHandlerCommitsWithTheDoneMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all := ids("m", 40)
	b.receive(t, all...)

	b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
	})
	b.waitSettled(t)

	effects := b.effects(t)
	for _, id := range all {
		require.Equal(t, 1, effects[id], id)
		r := b.row(t, id)
		require.Equal(t, "done", r.Status)
		require.Equal(t, 1, r.Attempts)
		require.Empty(t, r.Errors)
	}
}

// One message's failure rolls back its own writes only: its neighbours in
// the same batch, and the same transaction, keep theirs.
func TestFailureIsIsolatedWithinTheBatchTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all := ids("m", 10)
	b.receive(t, all...)
	poison := all[4]

	b.start(t, dispatcher.Config{
		BatchSize: 10,
		Workers:   1,
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if err := b.recordEffect(ctx, tx, m); err != nil {
				return err
			}
			if m.ID == poison {
				return dispatcher.Permanent(errors.New("card declined"))
			}
			return nil
		})},
	})
	b.waitSettled(t)

	effects := b.effects(t)
	require.Zero(t, effects[poison], "the failed message's writes must be rolled back")
	var txids int
	b.scalar(t, &txids, "SELECT count(DISTINCT txid) FROM /* schema */effects")
	require.Equal(t, 1, txids, "the batch ran in one transaction")
	for _, id := range all {
		if id == poison {
			continue
		}
		require.Equal(t, 1, effects[id], id)
		require.Equal(t, "done", b.row(t, id).Status)
		require.NotNil(t, b.row(t, id).ProcessedAt, id)
	}
	r := b.row(t, poison)
	require.Equal(t, "dead", r.Status)
	require.Nil(t, r.ProcessedAt, "the claim marked it done in anticipation; the failure takes that back")
	require.Len(t, r.Errors, 1)
	require.Equal(t, "permanent: card declined", r.Errors[0].Error)
}

// The claim is planned once, with sequential and bitmap scans off, for its
// statement alone: the handlers' statements in the batch transaction are
// planned as their session says, here with the database's settings.
func TestHandlersArePlannedAsTheirSessionSays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receive(t, "m-1", "m-2")
	settings := make(chan string, 2)
	b.start(t, dispatcher.Config{
		// One worker, so that the second handler runs after the first in
		// the batch transaction: several workers' claims may split them.
		BatchSize: 10,
		Workers:   1,
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			var s string
			err := tx.QueryRow(ctx, "SELECT current_setting('enable_seqscan') || ' ' || current_setting('enable_bitmapscan') || ' ' || current_setting('plan_cache_mode')").Scan(&s)
			settings <- s
			return err
		})},
	})
	b.waitSettled(t)
	require.Equal(t, "on on auto", <-settings)
	require.Equal(t, "on on auto", <-settings)
}

func TestPanicIsRecordedWithItsStack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receive(t, "ok-1", "ok-2")
	b.receiveMsgs(t, inbox.Message{ID: "bug", EventType: "OrderPlaced", MaxAttempts: 1})

	b.start(t, dispatcher.Config{
		BatchSize: 10,
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if err := b.recordEffect(ctx, tx, m); err != nil {
				return err
			}
			if m.ID == "bug" {
				var nilMap map[string]int
				//lint:ignore SA5000 the test needs a real runtime panic, not a panic() call
				nilMap["boom"]++
			}
			return nil
		})},
	})
	b.waitSettled(t)

	r := b.row(t, "bug")
	require.Equal(t, "dead", r.Status)
	require.Len(t, r.Errors, 1)
	require.Equal(t, "panic: assignment to entry in nil map", r.Errors[0].Error)
	require.Contains(t, r.Errors[0].Trace, "dispatcher_test.TestPanicIsRecordedWithItsStack", "the trace must point at the handler")
	require.Equal(t, map[string]int{"ok-1": 1, "ok-2": 1}, b.effects(t))
}

// An always-failing handler ends dead after max attempts, with one history
// entry per attempt, in order.
func TestAlwaysFailingMessageEndsDeadWithEveryAttemptRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receiveMsgs(t, inbox.Message{ID: "m", EventType: "OrderPlaced", MaxAttempts: 4})

	b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			_ = b.recordEffect(ctx, tx, m)
			return fmt.Errorf("payment gateway timeout on attempt %d", m.Attempt)
		})},
	})
	b.waitSettled(t)

	r := b.row(t, "m")
	require.Equal(t, "dead", r.Status)
	require.Nil(t, r.ProcessedAt, "never processed")
	require.Equal(t, 4, r.Attempts)
	require.Len(t, r.Errors, 4)
	for i, e := range r.Errors {
		require.Equal(t, i+1, e.Attempt)
		require.Equal(t, fmt.Sprintf("payment gateway timeout on attempt %d", i+1), e.Error)
		require.Empty(t, e.Trace)
		if i > 0 {
			require.True(t, e.At.After(r.Errors[i-1].At))
		}
	}
	require.Equal(t, "payment gateway timeout on attempt 4", *r.LastError)
	require.Empty(t, b.effects(t), "no failed attempt may leave an effect")
}

func TestUnknownEventTypeIsRetriedThenDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receiveMsgs(t, inbox.Message{ID: "m", EventType: "RefundIssued", MaxAttempts: 2})

	b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
	})
	b.waitSettled(t)

	r := b.row(t, "m")
	require.Equal(t, "dead", r.Status)
	require.Len(t, r.Errors, 2)
	require.Contains(t, r.Errors[0].Error, `no handler for event type "RefundIssued" in consumer "payments"`)
}

func TestUndecodableMetadataIsPoisonNotAStall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receive(t, "good")
	b.receiveMsgs(t, inbox.Message{ID: "bad", EventType: "OrderPlaced", MaxAttempts: 1})
	// Written behind the inbox's back: metadata the inbox never produces.
	b.exec(t, `UPDATE /* schema */inbox SET metadata = '{"retries": 3}' WHERE message_id = 'bad'`)

	b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
	})
	b.waitSettled(t)

	require.Equal(t, "done", b.row(t, "good").Status)
	r := b.row(t, "bad")
	require.Equal(t, "dead", r.Status)
	require.Contains(t, r.Errors[0].Error, "metadata is not a JSON object of strings")
}

func TestSnoozeRetriesWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receiveMsgs(t, inbox.Message{ID: "m", EventType: "OrderPlaced", MaxAttempts: 2})

	var calls atomic.Int32
	b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			_ = b.recordEffect(ctx, tx, m)
			require.Equal(t, 1, m.Attempt, "a snooze must not spend an attempt")
			if calls.Add(1) <= 5 {
				return dispatcher.Snooze(time.Millisecond)
			}
			return nil
		})},
	})
	b.waitSettled(t)

	r := b.row(t, "m")
	require.Equal(t, "done", r.Status, "5 snoozes with MaxAttempts 2 must not make it dead")
	require.Equal(t, 1, r.Attempts)
	require.Empty(t, r.Errors)
	require.Equal(t, map[string]int{"m": 1}, b.effects(t), "a snoozed attempt's writes are rolled back")
}

// Due times are the database's now() plus the backoff, computed in the
// same statement as the history entry's timestamp: a worker whose clock is
// off cannot make a message due early or late.
func TestBackoffIsJudgedByTheDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receive(t, "m")
	const backoff = time.Hour + 17*time.Minute + 3*time.Second + 250*time.Millisecond

	handled := make(chan struct{}, 1)
	b.start(t, dispatcher.Config{
		RetryBackoffFunc: func(attempt int) time.Duration { return backoff },
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(context.Context, pgx.Tx, *dispatcher.Message) error {
			handled <- struct{}{}
			return errors.New("not yet")
		})},
	})
	<-handled
	b.waitFor(t, "SELECT status = 'pending' AND attempts = 1 FROM /* schema */inbox WHERE message_id = 'm'")

	r := b.row(t, "m")
	require.Len(t, r.Errors, 1)
	require.Equal(t, backoff, r.AvailableAt.Sub(r.Errors[0].At), "available_at must be the failure's now() plus the backoff, exactly")
	var inFuture bool
	b.scalar(t, &inFuture, "SELECT available_at > now() + interval '1 hour' FROM /* schema */inbox WHERE message_id = 'm'")
	require.True(t, inFuture)
}

// The attempt is committed before the handler runs: another session sees
// it while the handler is still going. A leased message is running, its
// attempt counted on the row; an in-transaction message is still pending
// to others (its batch transaction has not committed), and its attempt is
// counted by its batch's claim record, which outlives the transaction.
func TestAttemptIsCommittedBeforeTheHandlerRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receiveMsgs(t, inbox.Message{ID: "tx", EventType: "InTx"}, inbox.Message{ID: "leased", EventType: "Leased"})

	seen := make(chan string, 2)
	observe := func(ctx context.Context, m *dispatcher.Message) error {
		var (
			status          string
			attempts, claim int
		)
		// b.pool is another session: it sees only committed state.
		require.NoError(t, b.pool.QueryRow(ctx, b.sql(`
			SELECT status, attempts,
			       (SELECT count(*) FROM /* schema */inbox_claims AS c
			        WHERE i.message_id = ANY(c.message_ids) AND pg_xact_status(c.xid) = 'in progress')
			FROM /* schema */inbox AS i WHERE message_id = $1`), m.ID).Scan(&status, &attempts, &claim))
		seen <- fmt.Sprintf("%s %s %d, claimed %d", m.ID, status, attempts, claim)
		return nil
	}
	b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{
			"InTx":   dispatcher.InTx(func(ctx context.Context, _ pgx.Tx, m *dispatcher.Message) error { return observe(ctx, m) }),
			"Leased": dispatcher.Leased(observe),
		},
	})
	got := []string{<-seen, <-seen}
	require.ElementsMatch(t, []string{"tx pending 0, claimed 1", "leased running 1, claimed 0"}, got)
	b.waitSettled(t)
	require.Equal(t, 1, b.row(t, "tx").Attempts)
	require.Equal(t, 1, b.row(t, "leased").Attempts)
}

// A worker that loses its batch transaction in the middle of a handler
// (here the server ends its session, as in a failover, a restart or an
// operator's pg_terminate_backend) loses every write of the batch, business
// writes and done marks alike. That is the database's outage, not the
// messages' fault: neither attempt is charged, even the last one, nor
// recorded in the history; both messages simply run again.
func TestLostTransactionRollsBackTheWholeBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receiveMsgs(t, inbox.Message{ID: "m", EventType: "OrderPlaced", MaxAttempts: 1},
		inbox.Message{ID: "n", EventType: "OrderPlaced", MaxAttempts: 1})

	var cut atomic.Bool
	b.start(t, dispatcher.Config{
		BatchSize: 2,
		Workers:   1, // no other worker to count the lost batch first (as lost, both attempts)
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if err := b.recordEffect(ctx, tx, m); err != nil {
				return err
			}
			if m.ID == "n" && cut.CompareAndSwap(false, true) {
				// The server's pid, not the client's idea of it: behind
				// PgBouncer they differ.
				var pid int32
				require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
				_, err := b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, "SELECT 1")
				return err
			}
			return nil
		})},
	})
	b.waitSettled(t)

	require.True(t, cut.Load())
	for _, id := range []string{"m", "n"} {
		r := b.row(t, id)
		require.Equal(t, "done", r.Status, id)
		require.Equal(t, 1, r.Attempts, "%s: the cut attempt is given back", id)
		require.Empty(t, r.Errors, id)
		require.Nil(t, r.LastError, id)
	}
	rows, err := b.pool.Query(context.Background(), b.sql("SELECT message_id || ' ' || attempt FROM /* schema */effects ORDER BY 1"))
	require.NoError(t, err)
	effects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"m 1", "n 1"}, effects, "each effect once: the lost transaction's writes are gone")
	var left int
	b.scalar(t, &left, "SELECT count(*) FROM /* schema */inbox_claims WHERE pg_xact_status(xid) = 'aborted'")
	require.Zero(t, left, "the worker takes back its lost batch's claim record")
}

// The other workers of a process whose batch an outage cut leave that
// batch's claim record to its worker, which gives the attempts back: they
// do not count it as a lost batch (a crash's), which would charge them.
func TestACutBatchIsNotCountedAsLostByTheOtherWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msgs := make([]inbox.Message, 40)
	for i := range msgs {
		msgs[i] = inbox.Message{ID: fmt.Sprintf("m%02d", i), EventType: "OrderPlaced", MaxAttempts: 1}
	}
	b.receiveMsgs(t, msgs...)

	var cut sync.Map // ids whose first attempt was cut
	b.start(t, dispatcher.Config{
		BatchSize: 1,
		Workers:   4,
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if err := b.recordEffect(ctx, tx, m); err != nil {
				return err
			}
			if _, seen := cut.LoadOrStore(m.ID, true); !seen && m.ID[2]%2 == 0 {
				_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
				return err
			}
			return nil
		})},
	})
	b.waitSettled(t)

	var charged int
	b.scalar(t, &charged, "SELECT count(*) FROM /* schema */inbox WHERE status <> 'done' OR attempts <> 1 OR errors <> '[]'")
	require.Zero(t, charged, "messages charged for a cut")
	effects := b.effects(t)
	require.Len(t, effects, len(msgs))
	for id, n := range effects {
		require.Equal(t, 1, n, id)
	}
}

// A handler that breaks its own session every time cannot be told from a
// database outage by the cut alone: it is given its attempt back a few
// times, then charged, and its message, on its last attempt, ends dead
// instead of looping for ever.
func TestAHandlerThatAlwaysBreaksItsSessionEndsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receiveMsgs(t, inbox.Message{ID: "m", EventType: "OrderPlaced", MaxAttempts: 1})

	var calls atomic.Int32
	b.start(t, dispatcher.Config{
		// One worker, to count the calls: with more, another may claim the
		// message while the cut batch's worker is still settling it.
		Workers: 1,
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			calls.Add(1)
			if err := b.recordEffect(ctx, tx, m); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			return err
		})},
	})
	b.waitSettled(t)

	r := b.row(t, "m")
	require.Equal(t, "dead", r.Status)
	require.Equal(t, 1, r.Attempts)
	require.Len(t, r.Errors, 1)
	require.Contains(t, r.Errors[0].Error, "terminating connection")
	require.Equal(t, int32(4), calls.Load(), "three attempts given back, the fourth charged")
	require.Empty(t, b.effects(t))
}

// A batch whose commit the server cut (its session ended while it
// committed, as in a failover) charges no attempt either: its messages,
// each on its last attempt, run again and are done, not dead.
func TestCutCommitChargesNoAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// At the commit of the first transaction that wrote an effect, the
	// server ends that transaction's session: a deferred trigger runs
	// while it commits. The sequence says "first" whatever rolls back.
	b.exec(t, "CREATE SEQUENCE /* schema */cuts")
	b.exec(t, `CREATE FUNCTION /* schema */cut_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('`+b.schema+`.cuts') = 1 THEN
				PERFORM pg_terminate_backend(pg_backend_pid());
			END IF;
			RETURN NULL;
		END $$`)
	b.exec(t, `CREATE CONSTRAINT TRIGGER cut_commit AFTER INSERT ON /* schema */effects
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION /* schema */cut_commit()`)
	b.receiveMsgs(t, inbox.Message{ID: "m", EventType: "OrderPlaced", MaxAttempts: 1},
		inbox.Message{ID: "n", EventType: "OrderPlaced", MaxAttempts: 1})

	b.start(t, dispatcher.Config{
		BatchSize: 2,
		Workers:   1,
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			return b.recordEffect(ctx, tx, m)
		})},
	})
	b.waitSettled(t)

	var cuts int
	b.scalar(t, &cuts, "SELECT last_value FROM /* schema */cuts")
	require.Greater(t, cuts, 2, "a commit was cut, and the messages ran again")
	for _, id := range []string{"m", "n"} {
		r := b.row(t, id)
		require.Equal(t, "done", r.Status, id)
		require.Equal(t, 1, r.Attempts, "%s: the cut attempt is given back", id)
		require.Empty(t, r.Errors, id)
	}
	require.Equal(t, map[string]int{"m": 1, "n": 1}, b.effects(t))
}

// A worker paused between its claim and its handlers past its lease (a
// zombie) loses the message to another worker, which runs it once, and
// runs nothing itself. A leased zombie, paused after its batch committed,
// finds its lease renewed by nobody and its claim taken. An in-transaction
// zombie, paused before recording its claim, finds its batch transaction
// ended by the server, and its claim record refused.
func TestZombieWorkerRunsNothing(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"InTx", "Leased"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.receiveMsgs(t, inbox.Message{ID: "m", EventType: kind})

			var calls sync.Map // dispatcher name → attempts it ran
			handlers := func(name string) map[string]dispatcher.Handler {
				note := func(m *dispatcher.Message) { calls.Store(name, m.Attempt) }
				return map[string]dispatcher.Handler{
					"InTx": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
						note(m)
						return b.recordEffect(ctx, tx, m)
					}),
					"Leased": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
						note(m)
						_, err := b.pool.Exec(ctx, b.sql("INSERT INTO /* schema */effects (message_id, attempt) VALUES ($1, $2)"), m.ID, m.Attempt)
						return err
					}),
				}
			}
			lease := dispatcher.Config{HandlerTimeout: 100 * time.Millisecond, Lease: 300 * time.Millisecond, Workers: 1}

			zombieCfg := lease
			zombieCfg.Handlers = handlers("zombie")
			// The zombie's batch, once resumed, ends with a log line
			// whichever way it goes (claim refused, or a handler failing
			// on the ended transaction): wait for it before Stop, which
			// would otherwise keep handlers from running anyway.
			logged := make(chan struct{}, 1)
			zombieCfg.Logger = slog.New(notifyingHandler{logged})
			zombie := b.newDispatcher(t, zombieCfg)
			paused, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			dispatcher.SetAfterClaimHook(zombie, func([]string) {
				once.Do(func() { close(paused); <-resume })
			})
			require.NoError(t, zombie.Start(context.Background()))
			<-paused
			if kind == "Leased" {
				b.waitFor(t, "SELECT status = 'running' AND available_at < now() FROM /* schema */inbox WHERE message_id = 'm'")
			} else { // the server ends the zombie's idle batch transaction after a lease
				b.waitFor(t, fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity
					WHERE state = 'idle in transaction' AND query LIKE '%%%s%%claim_token%%')`, b.schema))
			}

			// Only the zombie's lease must run out. The rescuer keeps the
			// default lease: with the zombie's 300ms, a loaded machine
			// could end the rescuer's own batch transaction too, and the
			// rescuer would then run the message twice.
			b.start(t, dispatcher.Config{Handlers: handlers("rescuer"), Workers: 1})
			b.waitSettled(t)

			close(resume)
			select {
			case <-logged:
			case <-time.After(10 * time.Second):
				t.Fatal("the resumed zombie's batch never ended")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, zombie.Stop(ctx)) // returns once the zombie's batch is over

			_, zombieRan := calls.Load("zombie")
			require.False(t, zombieRan, "the zombie must not run a handler for a message it lost")
			require.Equal(t, map[string]int{"m": 1}, b.effects(t))
			r := b.row(t, "m")
			require.Equal(t, "done", r.Status)
			rescued, _ := calls.Load("rescuer")
			if kind == "Leased" {
				require.Equal(t, 2, rescued)
				require.Len(t, r.Errors, 1, "the zombie's lost attempt is in the history")
			} else {
				// The zombie's claim never committed and no handler of its
				// ran: there was no attempt to count.
				require.Equal(t, 1, rescued)
				require.Empty(t, r.Errors)
			}
		})
	}
}

// The producer's trace context, stored in the message's metadata, is the
// handler's: its spans continue the producer's trace.
func TestHandlerContinuesTheProducersTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receiveMsgs(t, inbox.Message{ID: "m", EventType: "OrderPlaced", Metadata: map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}})
	got := make(chan trace.SpanContext, 1)
	b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, _ pgx.Tx, _ *dispatcher.Message) error {
			got <- trace.SpanContextFromContext(ctx)
			return nil
		})},
	})
	sc := <-got
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", sc.SpanID().String())
	require.True(t, sc.IsRemote())
}

func TestLeasedHandlerGetsAStableIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receive(t, "m")

	keys := make(chan string, 3)
	b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
			keys <- m.IdempotencyKey()
			if m.Attempt < 3 {
				return errors.New("gateway 503")
			}
			return nil
		})},
	})
	first, second, third := <-keys, <-keys, <-keys
	require.Equal(t, first, second)
	require.Equal(t, first, third)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, first)

	other := dispatcher.Message{Consumer: consumer, ID: "m2"}
	require.NotEqual(t, first, other.IdempotencyKey())
	otherConsumer := dispatcher.Message{Consumer: "shipping", ID: "m"}
	require.NotEqual(t, first, otherConsumer.IdempotencyKey())
}

// A retrying head holds up its own key only; every key is handled in
// arrival order.
//
// The slow key's head fails until the fast key's last message has been
// handled (at least twice), however long a loaded machine takes for that,
// so the test waits on that condition rather than on a race between the
// fast key and the head's backoff.
func TestRetryingHeadBlocksOnlyItsOwnKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var msgs []inbox.Message
	for i := range 5 {
		for _, key := range []string{"slow", "fast"} {
			// Attempts enough for any wait: the head must not die.
			msgs = append(msgs, inbox.Message{ID: fmt.Sprintf("%s-%d", key, i), EventType: "OrderPlaced", OrderingKey: key, MaxAttempts: 10_000})
		}
	}
	b.receiveMsgs(t, msgs...)

	slowFailed := make(chan struct{})
	var (
		once     sync.Once
		fastDone atomic.Bool // fast-4's effect is written (its seq is below any later one)
	)
	b.start(t, dispatcher.Config{
		Workers: 4,
		RetryBackoffFunc: func(int) time.Duration {
			return 20 * time.Millisecond
		},
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if m.ID == "slow-0" && (m.Attempt < 3 || !fastDone.Load()) {
				once.Do(func() { close(slowFailed) })
				return errors.New("not yet")
			}
			if err := b.recordEffect(ctx, tx, m); err != nil {
				return err
			}
			if m.ID == "fast-4" {
				fastDone.Store(true)
			}
			return nil
		})},
	})
	<-slowFailed
	b.waitSettled(t)

	rows, err := b.pool.Query(context.Background(), b.sql("SELECT message_id FROM /* schema */effects ORDER BY seq"))
	require.NoError(t, err)
	order, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var slow, fast []string
	for _, id := range order {
		if strings.HasPrefix(id, "slow") {
			slow = append(slow, id)
		} else {
			fast = append(fast, id)
		}
	}
	require.Equal(t, []string{"slow-0", "slow-1", "slow-2", "slow-3", "slow-4"}, slow)
	require.Equal(t, []string{"fast-0", "fast-1", "fast-2", "fast-3", "fast-4"}, fast)
	require.Equal(t, "fast-4", order[4], "the fast key must finish while the slow head is still retrying")
}

// A dead head keeps its key's later messages waiting until an operator
// deals with it; other keys go on.
func TestDeadHeadHoldsItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receiveMsgs(t,
		inbox.Message{ID: "a-0", EventType: "OrderPlaced", OrderingKey: "a", MaxAttempts: 1},
		inbox.Message{ID: "a-1", EventType: "OrderPlaced", OrderingKey: "a"},
		inbox.Message{ID: "b-0", EventType: "OrderPlaced", OrderingKey: "b"},
	)
	b.start(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if m.ID == "a-0" {
				return errors.New("poison")
			}
			return b.recordEffect(ctx, tx, m)
		})},
	})
	b.waitFor(t, "SELECT status = 'done' FROM /* schema */inbox WHERE message_id = 'b-0'")
	b.waitFor(t, "SELECT status = 'dead' FROM /* schema */inbox WHERE message_id = 'a-0'")
	require.Equal(t, "pending", b.row(t, "a-1").Status)

	// An operator discards the dead head: its key moves on.
	b.exec(t, "UPDATE /* schema */inbox SET status = 'discarded' WHERE message_id = 'a-0'")
	b.waitFor(t, "SELECT status = 'done' FROM /* schema */inbox WHERE message_id = 'a-1'")
}

// Messages whose notification was folded (the inbox notifies once per
// interval) are announced by the notification it owes them afterwards, not
// left for the next poll. The dispatcher is idle between receives: it has
// no reason to look but the notifications.
func TestFoldedNotificationsStillWakeTheDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handled := make(chan string, 10)
	b.start(t, dispatcher.Config{
		PollInterval: time.Hour, // only a notification or a follow-up can wake it within the test
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(_ context.Context, _ pgx.Tx, m *dispatcher.Message) error {
			handled <- m.ID
			return nil
		})},
	})
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE application_name LIKE 'pgbox dispatcher (%) listener' AND query LIKE 'LISTEN %"+b.schema+"%')")
	in, err := inbox.New(b.pool, inbox.Config{Consumer: consumer, Schema: b.schema, NotifyInterval: 300 * time.Millisecond})
	require.NoError(t, err)
	receive := func(id string) {
		_, err := in.Receive(context.Background(), inbox.Message{ID: id, EventType: "OrderPlaced"})
		require.NoError(t, err)
	}
	receive("m-0") // notifies at once
	require.Equal(t, "m-0", <-handled)
	for i := 1; i <= 4; i++ {
		receive(fmt.Sprint("m-", i)) // folded: the dispatcher is idle and was not told
	}
	var got []string
	for range 4 {
		select {
		case id := <-handled:
			got = append(got, id)
		case <-time.After(30 * time.Second):
			t.Fatalf("folded messages were never announced; handled only %v", got)
		}
	}
	require.ElementsMatch(t, []string{"m-1", "m-2", "m-3", "m-4"}, got)
}

func TestNotificationWakesAnIdleDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handled := make(chan string, 1)
	b.start(t, dispatcher.Config{
		PollInterval: time.Hour, // only a notification can wake it within the test
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(_ context.Context, _ pgx.Tx, m *dispatcher.Message) error {
			handled <- m.ID
			return nil
		})},
	})
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE application_name LIKE 'pgbox dispatcher (%) listener' AND query LIKE 'LISTEN %"+b.schema+"%')")

	b.receive(t, "m-1")
	require.Equal(t, "m-1", <-handled)

	// Cut the listener's connection: it reconnects and wakes the workers,
	// so a message received meanwhile is not stranded until the next poll.
	b.exec(t, "SELECT pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE application_name LIKE 'pgbox dispatcher (%) listener' AND query LIKE 'LISTEN %"+b.schema+"%'")
	b.receive(t, "m-2")
	require.Equal(t, "m-2", <-handled)
	b.waitFor(t, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE application_name LIKE 'pgbox dispatcher (%) listener' AND query LIKE 'LISTEN %"+b.schema+"%')")
	b.receive(t, "m-3")
	require.Equal(t, "m-3", <-handled)
}

// notifyingHandler is a slog.Handler that signals on ch for each record at
// warn level or above.
type notifyingHandler struct{ ch chan<- struct{} }

func (h notifyingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h notifyingHandler) Handle(context.Context, slog.Record) error {
	select {
	case h.ch <- struct{}{}:
	default:
	}
	return nil
}

func (h notifyingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h notifyingHandler) WithGroup(string) slog.Handler      { return h }
