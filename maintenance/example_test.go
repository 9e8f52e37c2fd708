package maintenance_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/pgbox/pgbox/maintenance"
	"github.com/pgbox/pgbox/pgboxtest"
)

// Every process of a service starts a Maintainer; River elects one of them
// to enqueue the jobs. Here the leader's first run deletes the done
// messages processed more than a week ago, and keeps the recent and the
// dead ones. (Their ids, UUIDv7s as pgbox's outbox makes them, date them
// to days without a partition of their own, so they wait in the default
// partition, pruned row by row; a day's partition goes whole once all of
// it is past the week.)
func ExampleMaintainer() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_maintenance")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	for _, m := range []struct {
		name, status string
		age          time.Duration
	}{
		{"old-1", "done", 8 * 24 * time.Hour},
		{"old-2", "done", 9 * 24 * time.Hour},
		{"recent", "done", 24 * time.Hour},
		{"poison", "dead", 30 * 24 * time.Hour},
	} {
		id := pgboxtest.MessageIDAt(time.Now().Add(-m.age))
		_, err = db.Pool.Exec(ctx, `
			INSERT INTO `+db.Table("inbox")+` (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
			                                   processed_at, bucket)
			VALUES ('payments', $1, 'OrderPlaced', $2, 1, 3, '\x00', convert_to($3, 'UTF8'),
			        CASE WHEN $2 = 'done' THEN now() - $4 * interval '1 second' END, `+db.Table("inbox_bucket")+`($1))`,
			id, m.status, m.name, m.age.Seconds())
		if err != nil {
			panic(err)
		}
	}

	m, err := maintenance.New(db.Pool, maintenance.Config{
		InboxRetention: 7 * 24 * time.Hour,
		Logger:         slog.New(slog.DiscardHandler),
		Schema:         db.Schema,
	})
	if err != nil {
		panic(err)
	}
	if err := m.Start(ctx); err != nil {
		panic(err)
	}
	defer m.Stop(ctx)

	// Wait for the first run, as River recorded it.
	var deleted int64
	for deleted == 0 {
		time.Sleep(50 * time.Millisecond)
		_ = db.Pool.QueryRow(ctx, `
			SELECT coalesce(max((metadata->'output'->'deleted'->>'inbox_default')::int), 0)
			FROM `+db.Table("river_job")+` WHERE kind = 'pgbox.prune' AND state = 'completed'`).Scan(&deleted)
	}
	fmt.Println("deleted:", deleted)

	rows, _ := db.Pool.Query(ctx, "SELECT convert_from(payload, 'UTF8'), status FROM "+db.Table("inbox")+" ORDER BY 1")
	for rows.Next() {
		var name, status string
		_ = rows.Scan(&name, &status)
		fmt.Println("kept:", name, status)
	}
	// Output:
	// deleted: 2
	// kept: poison dead
	// kept: recent done
}
