package admin_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/pgboxtest"
)

// A deployment hook that knows a pod is gone for good (the orchestrator
// deleted it) can hand its leased messages over at once, instead of
// letting them wait out their leases. A process still alive is refused.
func ExampleAdmin_ReleaseLeases() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_admin_release_leases")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	// Two dispatchers of payments: pod payments-7f9c, killed a minute ago
	// with a leased message in hand (its claim token carries its id, 2, in
	// the high 32 bits), and pod payments-2b1d, alive.
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO `+db.Table("processes")+` (id, kind, consumer, name, host, pid, version, heartbeat_ms, last_seen_at) VALUES
		(1, 'dispatcher', 'payments', 'payments-2b1d', 'node-a', 1, 'v1', 10000, now()),
		(2, 'dispatcher', 'payments', 'payments-7f9c', 'node-b', 1, 'v1', 10000, now() - interval '1 minute');
		INSERT INTO `+db.Table("inbox")+` (consumer, message_id, event_type, status, attempts, max_attempts, available_at, claim_token, payload_hash, payload, bucket)
		VALUES ('payments', 'order-1', 'SendReceipt', 'running', 1, 5, now() + interval '1 hour', 2::bigint << 32, '\x00', '', `+db.Table("inbox_bucket")+`('order-1'))`)
	if err != nil {
		panic(err)
	}
	adm, err := admin.New(db.Pool, admin.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}

	ps, err := adm.Processes(ctx)
	if err != nil {
		panic(err)
	}
	for _, p := range ps.Processes {
		n, err := adm.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{ProcessID: p.ID, Actor: admin.Actor{Name: "deploy-hook"}})
		switch {
		case errors.Is(err, admin.ErrProcessAlive):
			fmt.Printf("%s: alive, left alone\n", p.Name)
		case err != nil:
			panic(err)
		default:
			fmt.Printf("%s: %d released\n", p.Name, n)
		}
	}
	// Output:
	// payments-2b1d: alive, left alone
	// payments-7f9c: 1 released
}
