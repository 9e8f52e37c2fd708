package dispatcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// BenchmarkClaimAndComplete measures the dispatcher's hot path without
// handlers: claim a batch of 100, then record every message done in one
// transaction, as handleInTx does (lock, complete, commit). One op is one
// message.
//
//	go test ./dispatcher -run '^$' -bench ClaimAndComplete -benchmem
func BenchmarkClaimAndComplete(b *testing.B) {
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
	d, err := New(pool, Config{Consumer: "bench", Schema: schema, BatchSize: 100,
		Handlers: map[string]Handler{"noop": InTx(func(context.Context, pgx.Tx, *Message) error { return nil })}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for left := b.N; left > 0; {
		token := rand.Int64()
		batch, n, _, err := d.claim(token, false)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			b.Fatalf("claimed nothing with %d messages left", left)
		}
		err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			held, err := d.lockClaimed(ctx, tx, token, batch)
			if err != nil {
				return err
			}
			outcomes := make([]outcome, len(held))
			for i, c := range held {
				outcomes[i] = done(c)
			}
			_, err = d.complete(ctx, tx, token, outcomes)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		left -= n
	}
}
