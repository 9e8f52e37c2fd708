package admin_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A status page or a scheduled job can do what inboxctl does: here, find
// why messages failed and replay the largest group once its cause is fixed.
func ExampleAdmin_Failures() {
	ctx := context.Background()
	db := pgtest.NewExampleDB(ctx, "example_admin_failures")
	defer db.Close()
	_, err := db.Pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, last_error)
		VALUES ('payments', 'order-1', 'ChargeCard', 'dead', 5, 5, '\x00', '', 'gateway timeout after 30s'),
		       ('payments', 'order-2', 'ChargeCard', 'dead', 5, 5, '\x00', '', 'gateway timeout after 31s'),
		       ('payments', 'order-3', 'ChargeCard', 'dead', 5, 5, '\x00', '', 'card declined')`, db.Schema))
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
		fmt.Printf("%d dead: %s\n", g.Dead, g.Normalized)
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
