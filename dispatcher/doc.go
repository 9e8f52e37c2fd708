// Package dispatcher runs handlers for the messages a consumer's inbox has
// stored: a pool of workers claims pending messages in batches with
// FOR UPDATE SKIP LOCKED, routes each by event type, retries failures with
// backoff, keeps every failed attempt's error, and parks messages that keep
// failing as dead until an operator replays or discards them.
//
// # Handlers
//
// An InTx handler gets the transaction that also marks the message done:
// its writes (business rows, outbox messages) commit together with the done
// mark or not at all. That is what makes its effect happen exactly once,
// even if the process is killed at any instant.
//
//	payments, err := inbox.New(pool, inbox.Config{Consumer: "payments"})
//	d, err := dispatcher.New(pool, dispatcher.Config{
//		Inbox: payments,
//		Handlers: map[string]dispatcher.Handler{
//			"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
//				_, err := tx.Exec(ctx, "INSERT INTO payments (order_id) VALUES ($1) ON CONFLICT DO NOTHING", m.ID)
//				return err
//			}),
//			"ChargeCard": dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
//				return gateway.Charge(ctx, m.Payload, m.IdempotencyKey())
//			}),
//		},
//	})
//	err = d.Start(ctx)
//	defer d.Stop(shutdownCtx)
//
// A Leased handler is for side effects outside the database. The message is
// claimed under a lease, the claim is committed, the handler runs with no
// transaction open, and then the message is marked done. A worker that dies
// mid-call leaves the message to be claimed again once the lease expires, so
// the outside world sees the call at least once. Message.IdempotencyKey is
// the same on every attempt: pass it on, and a provider that honours
// idempotency keys (as payment APIs do) turns the repeat into a no-op.
//
// # What a handler returns
//
// nil marks the message done. Any other error is recorded on the row (the
// attempt, the database time and the text; a panic is recovered and recorded
// with its stack) and the message is retried after Config.RetryBackoffFunc's
// delay, or marked dead when it is out of attempts. Permanent(err) marks it
// dead at once. Snooze(d) retries it after d without spending an attempt.
// Unavailable(err) says the handler's dependency is down: the attempt is
// refunded and the dispatcher stops claiming the message's event type,
// probing with one message after each backoff
// (Config.UnavailableBackoffFunc) until a probe returns anything else, so
// an outage of any length leaves no message dead; each process finds an
// outage for itself (Dispatcher.UnavailableErr). A message whose event
// type has no handler fails like a handler error, so a handler deployed
// later still finds it.
//
// # Pauses
//
// An operator may pause a consumer, or one of its event types
// (inboxctl pause, the console, admin.Pause): a row of consumer_pauses.
// Every dispatcher of the consumer reads its pauses at most once per
// Config.PollInterval and claims none of the paused messages until the
// row is deleted; they keep arriving and wait as pending, and a paused
// message at the head of its ordering key holds its key. A batch already
// claimed finishes. Dispatcher.PauseErr says what is paused, by whom and
// why.
//
// # Guarantees, and how they are kept
//
// A worker claims a batch inside the transaction that handles it: one
// UPDATE locks the messages, counts the attempt, marks in-transaction
// messages done (a failure overwrites that before the commit) and gives
// leased ones their lease. Until that transaction commits, other sessions
// see its in-transaction messages as pending (and locked); if it never
// commits, the done marks and the handlers' writes vanish together. Leased
// messages are called after the commit.
//
// The attempt counts before any handler runs: the worker records the batch
// (its transaction's id and messages) in inbox_claims from a second
// session first. If the transaction then dies with its process, the next
// claim finds the record of an aborted transaction and counts the lost
// attempts before any batch runs, so a message that crashes its whole
// process (os.Exit, an OOM kill, a panic in a goroutine it spawned) still
// uses up its attempts and ends dead rather than crash-looping. Such a
// message, and one whose lease expired, is then claimed alone, one per
// process at a time, so that a message that keeps crashing its process
// takes nothing else down after the first time. While a worker lives, the
// leases of the messages waiting their turn in its batch are renewed; a
// batch transaction that sits idle for a whole lease (a stalled or cut-off
// process) is ended by the server, and a worker whose transaction was ended
// runs no handler.
//
// In-transaction handlers of a batch share one transaction, each in its
// own savepoint: a failing handler's writes are rolled back and its
// neighbours' are kept. If a handler's context ends while its query is
// running, pgx closes the connection and the transaction is lost: the
// handler's attempt is recorded as failed, and its neighbours go back to
// pending without spending an attempt and run again. A database outage
// that cuts the transaction (a failover or switchover, a restart, a
// session ended by the server) is nobody's fault among the messages: the
// attempt it cut is given back too, with nothing in its history, up to
// three times per message and process, after which it is charged (a
// handler that breaks its own session every time still ends dead).
//
// Messages that share an ordering key are claimed only at the head of
// their key (no earlier message of the key pending, running or dead), so
// they run one at a time, in arrival order, across every worker and process.
// A retrying head holds up only its own key; a dead head holds its key until
// an operator replays or discards it.
//
// Due times, backoff and leases are all the database's now() plus a delay:
// the workers' clocks never matter.
//
// # Waking up and shutting down
//
// The inbox sends a NOTIFY when it stores new pending messages (once per
// statement, on commit); a listener connection wakes an idle worker at once.
// Polling every Config.PollInterval remains the source of truth, so a lost
// notification costs latency, never a message.
//
// Stop stops claiming and waits for the handlers in flight. If its context
// ends first, it cancels their contexts; the messages they held go back to
// pending at once, without spending an attempt.
package dispatcher
