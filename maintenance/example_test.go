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
// dead ones.
func ExampleMaintainer() {
	ctx := context.Background()
	db, err := pgboxtest.OpenDB(ctx, os.Getenv("DATABASE_URL"), "example_maintenance")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO `+db.Table("inbox")+` (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
		VALUES ('payments', 'old-1', 'OrderPlaced', 'done', 1, 3, '\x00', '', now() - interval '8 days', `+db.Table("inbox_bucket")+`('old-1')),
		       ('payments', 'old-2', 'OrderPlaced', 'done', 1, 3, '\x00', '', now() - interval '9 days', `+db.Table("inbox_bucket")+`('old-2')),
		       ('payments', 'recent', 'OrderPlaced', 'done', 1, 3, '\x00', '', now() - interval '1 day', `+db.Table("inbox_bucket")+`('recent')),
		       ('payments', 'poison', 'OrderPlaced', 'dead', 3, 3, '\x00', '', NULL, `+db.Table("inbox_bucket")+`('poison'))`)
	if err != nil {
		panic(err)
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
			SELECT coalesce(max((metadata->'output'->'deleted'->>'inbox')::int), 0)
			FROM `+db.Table("river_job")+` WHERE kind = 'pgbox.prune' AND state = 'completed'`).Scan(&deleted)
	}
	fmt.Println("deleted:", deleted)

	rows, _ := db.Pool.Query(ctx, "SELECT message_id, status FROM "+db.Table("inbox")+" ORDER BY 1")
	for rows.Next() {
		var id, status string
		_ = rows.Scan(&id, &status)
		fmt.Println("kept:", id, status)
	}
	// Output:
	// deleted: 2
	// kept: poison dead
	// kept: recent done
}
