package admin_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/pgboxtest"
)

// A status page or a scheduled job can do what inboxctl does: here, find
// why messages failed and replay the largest group once its cause is fixed.
func ExampleAdmin_Failures() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_admin_failures")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO `+db.Table("inbox")+` (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		VALUES ('payments', 'order-1', 'ChargeCard', 'dead', 5, 5, '\x00', '', 'gateway timeout after 30s', `+db.Table("inbox_bucket")+`('order-1')),
		       ('payments', 'order-2', 'ChargeCard', 'dead', 5, 5, '\x00', '', 'gateway timeout after 31s', `+db.Table("inbox_bucket")+`('order-2')),
		       ('payments', 'order-3', 'ChargeCard', 'dead', 5, 5, '\x00', '', 'card declined', `+db.Table("inbox_bucket")+`('order-3'))`)
	if err != nil {
		panic(err)
	}

	adm, err := admin.New(db.Pool, admin.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	groups, err := adm.Failures(ctx, admin.FailuresOptions{Consumer: "payments", Limit: 10})
	if err != nil {
		panic(err)
	}
	for _, g := range groups {
		// Partial: more failed messages than Failures reads (the newest
		// FailuresReadDefault); the counts are lower bounds, and
		// FailuresOptions.Exact would count them all.
		atLeast := ""
		if g.Partial {
			atLeast = "at least "
		}
		fmt.Printf("%s%d dead: %s\n", atLeast, g.Dead, g.Normalized)
	}

	replayed, err := adm.Replay(ctx, admin.ReplayOptions{
		Filter: admin.Filter{Fingerprint: groups[0].Fingerprint},
		Note:   "gateway fixed",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println("replayed:", replayed)
	// Output:
	// 2 dead: gateway timeout after <n>s
	// 1 dead: card declined
	// replayed: 2
}

// An operator tool can record who replayed what in the same transaction as
// the replay, so that there is never a replay without its audit row, nor
// an audit row for a replay that rolled back.
func ExampleAdmin_ReplayTx() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_admin_replay_tx")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	_, err = db.Pool.Exec(ctx, `
		CREATE TABLE `+db.Table("audit")+` (who text, what text, messages bigint);
		INSERT INTO `+db.Table("inbox")+` (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error, bucket)
		VALUES ('payments', 'order-1', 'ChargeCard', 'dead', 5, 5, '\x00', '', 'gateway timeout', `+db.Table("inbox_bucket")+`('order-1')),
		       ('payments', 'order-2', 'ChargeCard', 'dead', 5, 5, '\x00', '', 'gateway timeout', `+db.Table("inbox_bucket")+`('order-2'))`)
	if err != nil {
		panic(err)
	}
	adm, err := admin.New(db.Pool, admin.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}

	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		n, err := adm.ReplayTx(ctx, tx, admin.ReplayOptions{Filter: admin.Filter{Consumer: "payments"}, Note: "OPS-412"})
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+db.Table("audit")+" VALUES ('alice', 'replay OPS-412', $1)", n)
		return err
	})
	if err != nil {
		panic(err)
	}

	var who string
	var messages int64
	if err := db.Pool.QueryRow(ctx, "SELECT who, messages FROM "+db.Table("audit")).Scan(&who, &messages); err != nil {
		panic(err)
	}
	pending, err := adm.Count(ctx, admin.Filter{Consumer: "payments", Statuses: []pgbox.InboxStatus{pgbox.InboxPending}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s replayed %d; %d pending\n", who, messages, pending)
	// Output:
	// alice replayed 2; 2 pending
}
