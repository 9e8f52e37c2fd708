package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Whatever a broker hands over, Receive either stores it exactly, reports
// it as a duplicate or conflict of what is stored, or refuses it as invalid
// and stores nothing. It never fails with a database error.
func FuzzReceive(f *testing.F) {
	f.Add("order-17/placed", "OrderPlaced", "order-17", []byte(`{"order":17}`), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("", "", "", []byte(nil), "", "")
	f.Add("a\x00b", "E", "k\x00", []byte{0x00, 0xff}, "k\x00", "\xff")
	f.Add("a\x00b", "E", "", []byte("x"), "k", "v") // one bad field alone
	f.Add("ünïcödé ✓", "Typ € ", " ", []byte("\xc3\x28"), "\"quoted\"", "<script>")
	f.Add("x'); DROP TABLE inbox; --", "E", "", []byte("'"), "\\", "\\u0000")

	ctx := context.Background()
	pool := pgtest.Pool(f)
	schema := pgtest.Schema(f)
	in, err := inbox.New(pool, inbox.Config{Consumer: "fuzz", Schema: schema, MaxPayloadBytes: 64 << 10})
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, id, eventType, key string, payload []byte, mk, mv string) {
		m := inbox.Message{ID: id, EventType: eventType, OrderingKey: key, Payload: payload, Metadata: map[string]string{mk: mv}}
		out, err := in.Receive(ctx, m)

		var stored []byte
		var storedType string
		var storedMetadata map[string]string
		readErr := pool.QueryRow(ctx, ident.Render("SELECT payload, event_type, metadata FROM /* schema */inbox WHERE consumer = 'fuzz' AND message_id = $1", schema), id).
			Scan(&stored, &storedType, &storedMetadata)
		switch {
		case errors.Is(err, inbox.ErrInvalidMessage):
			require.Zero(t, out)
			if !errors.Is(readErr, pgx.ErrNoRows) && readErr != nil {
				return // an id PostgreSQL cannot even look up (invalid UTF-8) is certainly not stored
			}
			if readErr == nil {
				// Only an earlier, valid message with this id may be there.
				_, again := in.Receive(ctx, inbox.Message{ID: id, EventType: "Probe", Payload: stored})
				require.NoError(t, again)
			}
		case errors.Is(err, inbox.ErrPayloadConflict):
			require.Equal(t, inbox.Conflict, out)
			require.NoError(t, readErr)
			require.NotEqual(t, nonNil(payload), stored)
		case err != nil:
			t.Fatalf("Receive(%q) failed with a non-input error: %v", id, err)
		default:
			require.NoError(t, readErr)
			require.Equal(t, nonNil(payload), stored, "payload bytes round-trip exactly")
			if out == inbox.Accepted {
				require.Equal(t, eventType, storedType)
				require.Equal(t, m.Metadata, storedMetadata)
			}
			again, err := in.Receive(ctx, m)
			require.NoError(t, err)
			require.Equal(t, inbox.Duplicate, again)
		}
	})
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
