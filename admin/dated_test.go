package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
)

// A foreign id dated by its IDTime (an SQS MessageId with its
// SentTimestamp) lives in its day's partition, which its id alone does not
// name: the operator's lookups by id (show, consumers of an id, statuses,
// edit and replay) find it there, and its redelivery still finds the
// edited row.
func TestLookupsByIDFindADatedForeignID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	in, err := inbox.New(b.pool, inbox.Config{Consumer: "payments", Schema: b.schema, RecentIDs: -1})
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	msg := inbox.Message{ID: "5fb1c3a4-0d3e-4c8e-9a55-4f3c2b1d0e9f", IDTime: now, EventType: "ChargeCard", Payload: []byte(`{"order":17}`)}
	out, err := in.Receive(ctx, msg)
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out)
	var where string
	require.NoError(t, b.pool.QueryRow(ctx, ident.Render(`SELECT tableoid::regclass::text FROM /* schema */inbox`, b.schema)).Scan(&where))
	require.Contains(t, where, "inbox_d"+now.UTC().Format("20060102"))
	b.exec(t, `UPDATE /* schema */inbox SET status = 'dead', attempts = 3, last_error = 'card declined'`)

	d, err := b.adm.Show(ctx, "payments", msg.ID)
	require.NoError(t, err)
	require.Equal(t, pgbox.InboxDead, d.Status)
	consumers, err := b.adm.ConsumersOf(ctx, msg.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"payments"}, consumers)
	statuses, err := b.adm.IDStatuses(ctx, "payments", []string{msg.ID})
	require.NoError(t, err)
	require.Equal(t, map[string]pgbox.InboxStatus{msg.ID: pgbox.InboxDead}, statuses)

	require.NoError(t, b.adm.EditAndReplay(ctx, admin.EditOptions{
		Actor: admin.Actor{Name: "alice"}, Consumer: "payments", ID: msg.ID, Note: "fixed", Payload: []byte(`{"order":17,"fixed":true}`)}))
	d, err = b.adm.Show(ctx, "payments", msg.ID)
	require.NoError(t, err)
	require.Equal(t, pgbox.InboxPending, d.Status)
	require.JSONEq(t, `{"order":17,"fixed":true}`, string(d.Payload))

	out, err = in.Receive(ctx, msg)
	require.NoError(t, err)
	require.Equal(t, inbox.Duplicate, out)
}
