package migrations_test

import (
	"context"
	"crypto/sha256"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/migrations"
	"github.com/pgbox/pgbox/relay"
)

// An inbox and outbox at version 8, holding messages, upgraded to version
// 9: every message is still found by its redelivery, ids made until the
// day after the upgrade included (a producer whose clock runs ahead);
// new messages go where the bucket rule puts them, numbered after the old
// ones; the outbox's old rows are published; and down to 8 again loses
// nothing.
func TestUpgradeKeepsEveryMessageFindable(t *testing.T) {
	t.Parallel()
	runUpgrade(t, nil)
}

// The same upgrade, after the statements docs/operations.md gives for a
// large inbox ("Upgrading a large inbox to version 9"), read from that page
// and run as an operator would, ahead of the migration: the migration uses
// what they made instead of making it again.
func TestUpgradeAfterThePreparationOfALargeInbox(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- upgrade to 9 -->\n```sql\n(.*?)```").FindSubmatch(body)
	require.NotNil(t, m, "docs/operations.md has lost its upgrade statements")
	var statements []string
	for _, s := range strings.Split(string(m[1]), ";\n") {
		if s = strings.TrimSpace(s); s != "" {
			require.NotContains(t, strings.ToUpper(s), "SET ", "session state is lost behind a pooler: %s", s)
			statements = append(statements, strings.ReplaceAll(s, "pgbox.", "/* schema */"))
		}
	}
	runUpgrade(t, statements)
}

// runUpgrade migrates a schema to version 8, fills it, runs prepare (SQL
// statements naming the schema "/* schema */", each on its own), and
// upgrades it to 9.
func runUpgrade(t *testing.T, prepare []string) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)
	sql := func(q string) string { return ident.Render(q, schema) }
	m, err := migrations.New(pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	defer m.Close()
	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, err = m.DownTo(ctx, 8)
	require.NoError(t, err)

	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	today := partition.DayOf(now)
	legacy := map[string]string{ // id: status
		partition.IDAt(now).String():                      "done",
		partition.IDAt((today + 1).Time()).String():       "pending", // made "tomorrow": a clock ahead
		partition.IDAt(now.Add(-24 * time.Hour)).String(): "dead",
		"order-1": "dead",
		partition.IDAt(now.Add(-48 * time.Hour)).String()[:20] + "X": "done", // no UUID at all
	}
	hash := sha256.Sum256([]byte("p"))
	for id, status := range legacy {
		_, err := pool.Exec(ctx, sql(`
			INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at)
			VALUES ('payments', $1, 'E', $2, 1, 3, $3, 'p', CASE WHEN $2 = 'done' THEN now() END)`), id, status, hash[:])
		require.NoError(t, err)
	}
	pendingOutbox := partition.IDAt(now)
	_, err = pool.Exec(ctx, sql(`
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, published_at)
		VALUES ($1, 'orders', 'E', 'p', 'pending', NULL), ($2, 'orders', 'E', 'p', 'published', now())`),
		pendingOutbox, partition.IDAt(now))
	require.NoError(t, err)
	var lastSeq int64
	require.NoError(t, pool.QueryRow(ctx, sql("SELECT max(seq) FROM /* schema */inbox")).Scan(&lastSeq))

	for _, s := range prepare {
		_, err := pool.Exec(ctx, sql(s))
		require.NoError(t, err, s)
	}

	_, err = m.Up(ctx)
	require.NoError(t, err)

	var origin, generation int32
	require.NoError(t, pool.QueryRow(ctx, sql("SELECT origin_day, generation FROM /* schema */partitioning WHERE table_name = 'inbox'")).
		Scan(&origin, &generation))
	require.EqualValues(t, today+2, origin, "the old ids stay undated")
	require.EqualValues(t, 1, generation, "generation 0, the old table, takes nothing new")
	if prepare != nil {
		var pkeys int
		// The index's columns by name, from the catalogs of this table only:
		// pg_indexes would print every index of the database, and fail on one
		// a parallel test drops meanwhile ("could not open relation").
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT count(*) FROM pg_catalog.pg_index AS x
			WHERE x.indrelid = $1::regclass
			  AND ARRAY(SELECT a.attname::text FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
			            JOIN pg_catalog.pg_attribute AS a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
			            ORDER BY k.n) = ARRAY['consumer', 'message_id', 'bucket']`,
			ident.Quote(schema)+".inbox_g0").Scan(&pkeys))
		require.Equal(t, 1, pkeys, "the migration made the prepared index the primary key, and no other")
	}

	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema, RecentIDs: -1})
	require.NoError(t, err)
	where := func(id string) (table string) {
		require.NoError(t, pool.QueryRow(ctx, sql(`
			SELECT c.relname FROM /* schema */inbox AS i JOIN pg_catalog.pg_class AS c ON c.oid = i.tableoid
			WHERE i.consumer = 'payments' AND i.message_id = $1`), id).Scan(&table))
		return table
	}
	for id := range legacy {
		require.Equal(t, "inbox_g0", where(id), id)
		o, err := in.Receive(ctx, inbox.Message{ID: id, EventType: "E", Payload: []byte("p")})
		require.NoError(t, err, id)
		require.Equal(t, inbox.Duplicate, o, id)
	}
	fresh := map[string]string{ // a new id: where it goes
		partition.IDAt(now).String():                                         "inbox_g1",
		partition.IDAt(partition.Day(origin).Time().Add(time.Hour)).String(): "inbox_d" + partition.Day(origin).String(),
		"order-2": "inbox_g1",
	}
	for id, want := range fresh {
		o, err := in.Receive(ctx, inbox.Message{ID: id, EventType: "E", Payload: []byte("p")})
		require.NoError(t, err, id)
		require.Equal(t, inbox.Accepted, o, id)
		require.Equal(t, want, where(id), id)
	}
	var newSeq int64
	require.NoError(t, pool.QueryRow(ctx, sql("SELECT min(seq) FROM /* schema */inbox WHERE message_id = 'order-2'")).Scan(&newSeq))
	require.Greater(t, newSeq, lastSeq, "arrival numbers go on from the old table's")

	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer pub.Close()
	r, err := relay.New(pool, relay.Config{Publisher: pub, Schema: schema, PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.Eventually(t, func() bool {
		var status string
		err := pool.QueryRow(ctx, sql("SELECT status FROM /* schema */outbox WHERE id = $1"), pendingOutbox).Scan(&status)
		return err == nil && status == "published"
	}, 30*time.Second, 10*time.Millisecond, "the relay publishes and records an outbox row from before the upgrade")
	require.NoError(t, r.Stop(ctx))

	_, err = m.DownTo(ctx, 8)
	require.NoError(t, err)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, sql("SELECT count(*) FROM /* schema */inbox")).Scan(&rows))
	require.Equal(t, len(legacy)+len(fresh), rows)
	require.NoError(t, pool.QueryRow(ctx, sql("SELECT count(*) FROM /* schema */outbox")).Scan(&rows))
	require.Equal(t, 2, rows)
	_, err = m.Up(ctx)
	require.NoError(t, err)
}
