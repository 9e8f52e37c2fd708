package bench

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// loadOutbox writes n outbox rows to topic, 1000 per transaction.
func loadOutbox(ctx context.Context, pool *pgxpool.Pool, out *outbox.Outbox, topic string, n int) error {
	for from := 0; from < n; from += 1000 {
		msgs := make([]outbox.Message, 0, 1000)
		for range min(1000, n-from) {
			msgs = append(msgs, outbox.Message{Topic: topic, Payload: benchPayload})
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := out.Write(ctx, tx, msgs...)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// waitOutboxDone waits until every outbox row is published.
func waitOutboxDone(ctx context.Context, pool *pgxpool.Pool) error {
	return waitNone(ctx, pool, "outbox", "published_at IS NULL")
}

// relayDrain publishes a pre-written outbox of n rows through publisher
// (made by newPublisher, closed after) and reports rows per second.
func (e *env) relayDrain(n int, newPublisher func(ctx context.Context) (message.Publisher, func(), error)) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		n := s.n(n)
		r, err := e.newRig(ctx, 8)
		if err != nil {
			return nil, err
		}
		defer r.close()
		out, err := outbox.New(r.pool, outbox.Config{Schema: pgboxSchemaName})
		if err != nil {
			return nil, err
		}
		if err := loadOutbox(ctx, r.pool, out, "bench", n); err != nil {
			return nil, err
		}
		if err := vacuum(ctx, r.pool, pgboxSchemaName, "outbox"); err != nil {
			return nil, err
		}
		pub, closePub, err := newPublisher(ctx)
		if err != nil {
			return nil, err
		}
		defer closePub()
		rel, err := relay.New(r.pool, relay.Config{Schema: pgboxSchemaName, Publisher: pub, Logger: e.log, ListenConnConfig: e.listen})
		if err != nil {
			return nil, err
		}
		start := time.Now()
		if err := rel.Start(ctx); err != nil {
			return nil, err
		}
		defer rel.Stop(context.WithoutCancel(ctx))
		if err := waitOutboxDone(ctx, r.pool); err != nil {
			return nil, err
		}
		return Figures{"msgs/s": float64(n) / time.Since(start).Seconds()}, nil
	}
}

// goChannel is an in-process Watermill publisher with a subscriber that
// takes everything: the relay's own cost, with no broker behind it.
func goChannel(ctx context.Context) (message.Publisher, func(), error) {
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10_000}, watermill.NopLogger{})
	msgs, err := ps.Subscribe(ctx, "bench")
	if err != nil {
		return nil, nil, err
	}
	go func() {
		for m := range msgs {
			m.Ack()
		}
	}()
	return ps, func() { _ = ps.Close() }, nil
}

// natsJetStream publishes to a JetStream stream of its own, deleted after.
func natsJetStream(url string) func(ctx context.Context) (message.Publisher, func(), error) {
	return func(ctx context.Context) (message.Publisher, func(), error) {
		nc, err := nats.Connect(url)
		if err != nil {
			return nil, nil, err
		}
		js, err := natsjs.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		if _, err := js.CreateOrUpdateStream(ctx, natsjs.StreamConfig{Name: "pgbox_bench", Subjects: []string{"bench"}}); err != nil {
			nc.Close()
			return nil, nil, err
		}
		pub, err := jetstream.NewPublisher(jetstream.PublisherConfig{URL: url, Logger: watermill.NopLogger{}})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return pub, func() {
			_ = pub.Close()
			_ = js.DeleteStream(context.Background(), "pgbox_bench")
			nc.Close()
		}, nil
	}
}
