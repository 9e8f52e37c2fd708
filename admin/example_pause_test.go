package admin_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/pgboxtest"
)

// A deploy script can pause a consumer while a downstream service is
// down, and resume it afterwards: messages keep arriving and wait.
func ExampleAdmin_Pause() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_admin_pause")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO `+db.Table("inbox")+` (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, bucket)
		VALUES ('payments', 'order-1', 'ChargeCard', 'pending', 0, 5, '\x00', '', `+db.Table("inbox_bucket")+`('order-1'))`)
	if err != nil {
		panic(err)
	}
	adm, err := admin.New(db.Pool, admin.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}

	actor := admin.Actor{Name: "deploy-bot"}
	p, err := adm.Pause(ctx, admin.PauseOptions{Actor: actor, Consumer: "payments", EventType: "ChargeCard", Reason: "gateway maintenance"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("paused %s by %s: %s\n", p.Scope(), p.PausedBy, p.Reason)

	_, err = adm.Pause(ctx, admin.PauseOptions{Actor: actor, Consumer: "payments", EventType: "ChargeCard", Reason: "again"})
	fmt.Println("pause again:", errors.Is(err, admin.ErrAlreadyPaused))

	if _, err := adm.Resume(ctx, admin.ResumeOptions{Actor: actor, Consumer: "payments", EventType: "ChargeCard"}); err != nil {
		panic(err)
	}
	pauses, err := adm.Pauses(ctx, "payments")
	if err != nil {
		panic(err)
	}
	fmt.Println("pauses left:", len(pauses))
	// Output:
	// paused event type "ChargeCard" of consumer "payments" by deploy-bot: gateway maintenance
	// pause again: true
	// pauses left: 0
}
