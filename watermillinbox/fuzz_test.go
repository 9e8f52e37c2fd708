package watermillinbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/watermillinbox"
)

// Whatever arrives from a broker, the handler either stores it (ack), acks
// a duplicate or conflict, or nacks it as invalid; it never nacks a valid
// message for lack of care, and what it stores is what arrived.
func FuzzHandler(f *testing.F) {
	f.Add("6f1d2c8e-9b8a-4c1e-8a2b-1d2e3f4a5b6c", "OrderPlaced", "order-1", []byte(`{}`), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("", "", "", []byte(nil), "", "")
	f.Add("not-a-uuid\x00", "\xff", "\x00", []byte{0xff}, "k", "\x00")

	ctx := context.Background()
	pool := pgtest.Pool(f)
	schema := pgtest.Schema(f)
	in, err := inbox.New(pool, inbox.Config{Consumer: "fuzz", Schema: schema, MaxPayloadBytes: 64 << 10})
	require.NoError(f, err)
	handle := watermillinbox.Handler(watermillinbox.Config{Inbox: in})

	f.Fuzz(func(t *testing.T, id, eventType, key string, payload []byte, mk, mv string) {
		m := message.NewMessage(id, payload)
		m.Metadata.Set(pgbox.MetadataEventType, eventType)
		m.Metadata.Set(pgbox.MetadataOrderingKey, key)
		m.Metadata.Set(mk, mv)
		err := handle(m)
		if errors.Is(err, inbox.ErrInvalidMessage) {
			return // nacked as poison: nothing new stored under this id
		}
		require.NoError(t, err, "a storable message must be acked")
		var stored []byte
		require.NoError(t, pool.QueryRow(ctx, ident.Render("SELECT payload FROM /* schema */inbox WHERE message_id = $1", schema), id).Scan(&stored))
		if payload == nil {
			payload = []byte{}
		}
		if string(stored) == string(payload) {
			return
		}
		// A conflict: the id was stored earlier with other bytes, and is kept;
		// redelivering those bytes is a duplicate.
		probe := message.NewMessage(id, stored)
		probe.Metadata.Set(pgbox.MetadataEventType, "Probe")
		require.NoError(t, handle(probe))
	})
}
