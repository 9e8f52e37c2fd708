package outbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
)

// Whatever a producer writes, Write either stores it exactly (in the
// caller's transaction) or refuses it as invalid and writes nothing, never
// failing with a database error.
func FuzzWrite(f *testing.F) {
	f.Add("orders", "OrderPlaced", "order-17", []byte(`{"order":17}`), "tenant", "acme")
	f.Add("", "", "", []byte(nil), "", "")
	f.Add("t\x00", "E\xff", "k\x00", []byte{0x00}, "k\x00", "\xff")
	f.Add("topic with spaces ✓", "", "'", []byte("\\"), "\"", "\\u0000")

	ctx := context.Background()
	pool := pgtest.Pool(f)
	schema := pgtest.Schema(f)
	box, err := outbox.New(pool, outbox.Config{Schema: schema, MaxPayloadBytes: 64 << 10})
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, topic, eventType, key string, payload []byte, mk, mv string) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		m := outbox.Message{Topic: topic, EventType: eventType, OrderingKey: key, Payload: payload, Metadata: map[string]string{mk: mv}}
		ids, err := box.Write(ctx, tx, m)
		if errors.Is(err, outbox.ErrInvalidMessage) {
			return
		}
		require.NoError(t, err, "Write failed with a non-input error")
		var (
			stored   []byte
			metadata map[string]string
		)
		err = tx.QueryRow(ctx, ident.Render("SELECT payload, metadata FROM /* schema */outbox WHERE id = $1", schema), ids[0]).Scan(&stored, &metadata)
		require.NotErrorIs(t, err, pgx.ErrNoRows)
		require.NoError(t, err)
		if payload == nil {
			payload = []byte{}
		}
		require.Equal(t, payload, stored)
		require.Equal(t, mv, metadata[mk])
	})
}
