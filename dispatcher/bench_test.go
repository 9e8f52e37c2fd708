package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// BenchmarkBatch measures the dispatcher's hot path with a no-op
// in-transaction handler: one batch of 100 as a worker runs it (begin,
// claim marking done, record the claim from a second session, commit).
// One op is one message.
//
//	go test ./dispatcher -run '^$' -bench Batch -benchmem
func BenchmarkBatch(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.Pool(b)
	schema := pgtest.Schema(b)
	in, err := inbox.New(pool, inbox.Config{Consumer: "bench", Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	for from := 0; from < b.N; from += 1000 {
		msgs := make([]inbox.Message, 0, 1000)
		for i := from; i < min(from+1000, b.N); i++ {
			msgs = append(msgs, inbox.Message{ID: fmt.Sprint("m", i), EventType: "noop", Payload: []byte(`{}`)})
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
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.inbox WHERE status <> 'done'`, schema)).Scan(&notDone); err != nil || notDone != 0 {
		b.Fatalf("%d messages not done (%v)", notDone, err)
	}
}
