package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
)

// An edited message is replayed with its new payload, the original kept;
// a redelivery of what the producer sent is still a duplicate (the stored
// hash is the producer's), and one with other bytes still a conflict.
func TestEditAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	in, err := inbox.New(b.pool, inbox.Config{Consumer: "payments", Schema: b.schema, RecentIDs: -1})
	require.NoError(t, err)
	original := []byte(`{"order":17,"currency":"usd"}`)
	out, err := in.Receive(ctx, inbox.Message{ID: "order-17", EventType: "ChargeCard", Payload: original})
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out)
	b.exec(t, `UPDATE /* schema */inbox SET status = 'dead', attempts = 3, last_error = 'unknown currency usd'`)

	fixed := []byte{0x00, 0xff, '{', '}'} // any bytes, binary too
	err = b.adm.EditAndReplay(ctx, admin.EditOptions{
		Actor: admin.Actor{Name: "alice"}, Consumer: "payments", ID: "order-17", Note: "currency upper-cased", Payload: fixed})
	require.NoError(t, err)

	d, err := b.adm.Show(ctx, "payments", "order-17")
	require.NoError(t, err)
	require.Equal(t, fixed, d.Payload)
	require.Equal(t, pgbox.InboxPending, d.Status)
	require.Zero(t, d.Attempts)
	require.Equal(t, 1, d.Replays)
	require.GreaterOrEqual(t, len(d.History), 2)
	edited, replayed := d.History[len(d.History)-2], d.History[len(d.History)-1]
	require.Equal(t, "edited", edited.Action)
	require.Equal(t, "currency upper-cased", edited.Note)
	require.Equal(t, "replayed", replayed.Action)
	require.Equal(t, pgbox.InboxDead, replayed.PreviousStatus)

	var kept []byte
	require.NoError(t, b.pool.QueryRow(ctx, ident.Render(
		`SELECT payload FROM /* schema */inbox_payload_edits WHERE consumer = 'payments' AND message_id = 'order-17'`, b.schema)).Scan(&kept))
	require.Equal(t, original, kept, "the original payload is kept")

	records, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{})
	require.NoError(t, err)
	require.Len(t, records, 1)
	require.Equal(t, admin.AuditEditPayload, records[0].Action)
	require.Equal(t, "alice", records[0].Actor.Name)
	require.EqualValues(t, 1, records[0].Affected)
	require.Equal(t, admin.AuditFinished, records[0].State)
	require.JSONEq(t, `{"consumer":"payments","ids":["order-17"],
		"previous_payload_sha256":"`+sha256Hex(original)+`","payload_sha256":"`+sha256Hex(fixed)+`"}`, string(records[0].Selection),
		"the record names the payload replaced and the new one by their hashes")

	// The producer redelivers what it sent: a duplicate, not a conflict,
	// and the edited payload stays.
	out, err = in.Receive(ctx, inbox.Message{ID: "order-17", EventType: "ChargeCard", Payload: original})
	require.NoError(t, err)
	require.Equal(t, inbox.Duplicate, out)
	out, err = in.Receive(ctx, inbox.Message{ID: "order-17", EventType: "ChargeCard", Payload: []byte("other bytes")})
	require.ErrorIs(t, err, inbox.ErrPayloadConflict)
	require.Equal(t, inbox.Conflict, out)
	d, err = b.adm.Show(ctx, "payments", "order-17")
	require.NoError(t, err)
	require.Equal(t, fixed, d.Payload)
	require.Equal(t, 1, d.Conflicts, "only the other bytes are a conflict")
}

// EditAndReplay refuses an empty payload, a missing message and one that
// is not replayable, and then changes and records nothing.
func TestEditAndReplayRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "done", 1, pgbox.InboxDone, "", 0)
	b.add(t, "payments", "fresh", 1, pgbox.InboxPending, "", 0)
	b.add(t, "payments", "dead", 1, pgbox.InboxDead, "boom", 0)
	before := b.snapshot(t)
	for name, tc := range map[string]struct {
		opts  admin.EditOptions
		is    error
		words string
	}{
		"Empty":       {admin.EditOptions{Consumer: "payments", ID: "dead-1"}, nil, "the new payload is empty"},
		"NoConsumer":  {admin.EditOptions{ID: "dead-1", Payload: []byte("x")}, nil, "a consumer is required"},
		"Missing":     {admin.EditOptions{Consumer: "payments", ID: "nope", Payload: []byte("x")}, admin.ErrNotFound, "holds no message nope"},
		"Done":        {admin.EditOptions{Consumer: "payments", ID: "done-1", Payload: []byte("x")}, admin.ErrNotReplayable, "message done-1 is done"},
		"NeverFailed": {admin.EditOptions{Consumer: "payments", ID: "fresh-1", Payload: []byte("x")}, admin.ErrNotReplayable, "is pending"},
	} {
		err := b.adm.EditAndReplay(ctx, tc.opts)
		require.ErrorContains(t, err, tc.words, name)
		if tc.is != nil {
			require.True(t, errors.Is(err, tc.is), name)
		}
	}
	require.Equal(t, before, b.snapshot(t))
	records, err := b.adm.AuditLog(ctx, admin.AuditLogOptions{})
	require.NoError(t, err)
	require.Empty(t, records, "a refused edit is not recorded")
	var edits int
	require.NoError(t, b.pool.QueryRow(ctx, ident.Render("SELECT count(*) FROM /* schema */inbox_payload_edits", b.schema)).Scan(&edits))
	require.Zero(t, edits)
}

// sha256Hex is p's SHA-256 in hex, as the audit log records an edit's
// payloads.
func sha256Hex(p []byte) string {
	h := sha256.Sum256(p)
	return hex.EncodeToString(h[:])
}
