package inbox_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// benchInbox is an Inbox on a fresh schema for a benchmark.
func benchInbox(b *testing.B, cfg inbox.Config) *inbox.Inbox {
	cfg.Consumer, cfg.Schema = "bench", pgtest.Schema(b)
	in, err := inbox.New(pgtest.Pool(b), cfg)
	if err != nil {
		b.Fatal(err)
	}
	return in
}

// idKinds name the benchmarks' messages: undated (a business key), UUIDv7s,
// and foreign ids dated by an IDTime (docs/design.md, "Dated foreign ids").
var idKinds = []struct {
	name    string
	message func(i int) inbox.Message
}{
	{"undated", func(i int) inbox.Message {
		return inbox.Message{ID: strconv.Itoa(i), EventType: "noop", Payload: []byte(`{}`)}
	}},
	{"UUIDv7", func(int) inbox.Message {
		return inbox.Message{ID: uuid.Must(uuid.NewV7()).String(), EventType: "noop", Payload: []byte(`{}`)}
	}},
	{"dated foreign", func(i int) inbox.Message {
		return inbox.Message{ID: strconv.Itoa(i), IDTime: time.Now(), EventType: "noop", Payload: []byte(`{}`)}
	}},
}

// BenchmarkReceive stores one new message per op, each in its own
// transaction.
func BenchmarkReceive(b *testing.B) {
	for _, k := range idKinds {
		b.Run(k.name, func(b *testing.B) {
			in := benchInbox(b, inbox.Config{})
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := in.Receive(ctx, k.message(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReceiveBatch stores new messages 100 to a statement; one op is
// one message.
func BenchmarkReceiveBatch(b *testing.B) {
	for _, k := range idKinds {
		b.Run(k.name, func(b *testing.B) {
			in := benchInbox(b, inbox.Config{})
			ctx := context.Background()
			b.ReportAllocs()
			msgs := make([]inbox.Message, 100)
			for next := 0; next < b.N; {
				msgs = msgs[:min(100, b.N-next)]
				for i := range msgs {
					msgs[i] = k.message(next)
					next++
				}
				if _, err := in.ReceiveBatch(ctx, msgs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRedelivery receives a message already committed, which the
// Inbox answers from its memory of recent ids; RecentIDs -1 shows the cost
// of asking the database instead.
func BenchmarkRedelivery(b *testing.B) {
	for _, tc := range []struct {
		name   string
		recent int
	}{{"remembered", 0}, {"database", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			in := benchInbox(b, inbox.Config{RecentIDs: tc.recent})
			ctx := context.Background()
			msg := inbox.Message{ID: "again", EventType: "noop", Payload: []byte(`{}`)}
			if _, err := in.Receive(ctx, msg); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if out, err := in.Receive(ctx, msg); err != nil || out != inbox.Duplicate {
					b.Fatal(out, err)
				}
			}
		})
	}
}
