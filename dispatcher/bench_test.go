package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// BenchmarkBatch measures the dispatcher's hot path with a no-op
// in-transaction handler: one batch of 100 as a worker runs it (begin,
// claim marking done, record the claim from a second session, commit).
// One op is one message.
//
//	go test ./dispatcher -run '^$' -bench Batch -benchmem
func BenchmarkBatch(b *testing.B) {
	benchDrain(b, pgtest.Schema(b), "")
}

// BenchmarkKeyedBatch is BenchmarkBatch for messages of 1,000 ordering
// keys, in an inbox whose pending index still holds the entries of 300,000
// messages handled an hour ago and not vacuumed since, as a busy day's
// partition between two autovacuums does. After each batch the next claim
// reads from the batch's earliest arrival (see package frontier), not from
// the index's start, over those entries.
//
//	go test ./dispatcher -run '^$' -bench KeyedBatch -benchmem
func BenchmarkKeyedBatch(b *testing.B) {
	ctx := context.Background()
	schema := pgtest.Schema(b)
	for _, q := range []string{
		`ALTER TABLE /* schema */inbox_g0 SET (autovacuum_enabled = off)`,
		`INSERT INTO /* schema */inbox (consumer, message_id, event_type, ordering_key, max_attempts, payload_hash, payload,
		                               received_at, available_at, bucket)
		 SELECT 'bench', 'old-' || g, 'noop', 'k' || g % 1000, 25, '\x00', '{}',
		        now() - interval '1 hour' + g * interval '1 millisecond', now() - interval '1 hour' + g * interval '1 millisecond', 0
		 FROM generate_series(1, 300000) AS g`,
		`UPDATE /* schema */inbox SET status = 'done', attempts = 1, processed_at = now() WHERE message_id LIKE 'old-%'`,
		`ANALYZE /* schema */inbox`,
	} {
		if _, err := pgtest.Pool(b).Exec(ctx, ident.Render(q, schema)); err != nil {
			b.Fatal(err)
		}
	}
	benchDrain(b, schema, "k")
}

// benchDrain receives b.N new messages into schema's inbox, with ordering
// keys prefix plus their number modulo 1,000 unless prefix is empty, and
// times one worker handling them in batches of 100.
func benchDrain(b *testing.B, schema, prefix string) {
	ctx := context.Background()
	pool := pgtest.Pool(b)
	in, err := inbox.New(pool, inbox.Config{Consumer: "bench", Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	for from := 0; from < b.N; from += 1000 {
		msgs := make([]inbox.Message, 0, 1000)
		for i := from; i < min(from+1000, b.N); i++ {
			m := inbox.Message{ID: fmt.Sprint("m", i), EventType: "noop", Payload: []byte(`{}`)}
			if prefix != "" {
				m.OrderingKey = fmt.Sprint(prefix, i%1000)
			}
			msgs = append(msgs, m)
		}
		if _, err := in.ReceiveBatch(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	d, err := New(pool, Config{Inbox: in, BatchSize: 100, Logger: slog.New(slog.DiscardHandler),
		Handlers: map[string]Handler{"noop": InTx(func(context.Context, pgx.Tx, *Message) error { return nil })}})
	if err != nil {
		b.Fatal(err)
	}
	d.records = pool // what Start opens; one worker needs no more
	b.ReportAllocs()
	b.ResetTimer()
	for left := b.N; left > 0; {
		n, err := d.runBatch()
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			b.Fatalf("claimed nothing with %d messages left", left)
		}
		left -= n
	}
	b.StopTimer()
	var notDone int
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.inbox WHERE status <> 'done' AND message_id NOT LIKE 'old-%%'`, schema)).Scan(&notDone); err != nil || notDone != 0 {
		b.Fatalf("%d messages not done (%v)", notDone, err)
	}
}
