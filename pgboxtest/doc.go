// Package pgboxtest helps a service's own tests prove that its consumers are
// idempotent, against a real PostgreSQL and without sleeps.
//
//   - Schema gives a test a throwaway schema, migrated to this build's
//     version and dropped when the test ends, so tests can run in parallel
//     on one database.
//   - WaitDrained returns once the schema's inbox and outbox hold no work
//     (nothing pending, in backoff or running): the deterministic "wait
//     until the dispatcher and relay are done" that replaces time.Sleep.
//   - IdempotencyCheck delivers the same message many times, one after
//     another and all at once, optionally crashing the consumer in between,
//     and fails unless its effect happened exactly once.
//
// A test of a payments consumer might read:
//
//	func TestPaymentsAreIdempotent(t *testing.T) {
//		t.Parallel()
//		pool := testPool(t) // the service's own *pgxpool.Pool for tests
//		schema := pgboxtest.Schema(t, pool)
//		payments, _ := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema})
//		d := startDispatcher(t, pool, schema) // the service's dispatcher.Config, on schema
//
//		pgboxtest.RequireIdempotent(t, pgboxtest.IdempotencyCheck{
//			Deliver: func(ctx context.Context, d pgboxtest.Delivery) error {
//				_, err := payments.Receive(ctx, orderPlaced(fmt.Sprint("order-", d.Round)))
//				return err
//			},
//			Settle: func(ctx context.Context) error { return pgboxtest.WaitDrained(ctx, pool, schema) },
//			Effect: func(ctx context.Context, round int) (n int, err error) {
//				err = pool.QueryRow(ctx, "SELECT count(*) FROM payments WHERE order_id = $1",
//					fmt.Sprint("order-", round)).Scan(&n)
//				return n, err
//			},
//		})
//	}
//
// pgbox's own tests use this package too.
package pgboxtest
