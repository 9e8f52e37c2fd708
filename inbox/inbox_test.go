package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/notify"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	pool   *pgxpool.Pool
	schema string
}

func setup(t *testing.T, cfg inbox.Config) (*inbox.Inbox, *testBundle) {
	t.Helper()
	b := &testBundle{pool: pgtest.Pool(t), schema: pgtest.Schema(t)}
	cfg.Schema = b.schema
	if cfg.Consumer == "" {
		cfg.Consumer = "payments"
	}
	in, err := inbox.New(b.pool, cfg)
	require.NoError(t, err)
	return in, b
}

// row is an inbox row as stored.
type row struct {
	Attempts    int
	EventType   string
	MaxAttempts int
	Metadata    map[string]string
	OrderingKey *string
	Payload     []byte
	ProcessedAt *time.Time
	Seq         int64
	Status      string
}

func (b *testBundle) row(t *testing.T, consumer, id string) *row {
	t.Helper()
	var r row
	err := b.pool.QueryRow(context.Background(), ident.Render(`
		SELECT attempts, event_type, max_attempts, metadata, ordering_key, payload, processed_at, seq, status
		FROM /* schema */inbox WHERE consumer = $1 AND message_id = $2`, b.schema), consumer, id).
		Scan(&r.Attempts, &r.EventType, &r.MaxAttempts, &r.Metadata, &r.OrderingKey, &r.Payload, &r.ProcessedAt, &r.Seq, &r.Status)
	if err == pgx.ErrNoRows {
		return nil
	}
	require.NoError(t, err)
	return &r
}

// conflicts returns the payloads of the conflicting deliveries recorded
// for id, oldest first.
func (b *testBundle) conflicts(t *testing.T, consumer, id string) [][]byte {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), ident.Render(
		"SELECT payload FROM /* schema */inbox_conflicts WHERE consumer = $1 AND message_id = $2 ORDER BY received_at", b.schema), consumer, id)
	require.NoError(t, err)
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	return payloads
}

func (b *testBundle) count(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), ident.Render("SELECT count(*) FROM /* schema */inbox", b.schema)).Scan(&n))
	return n
}

// partitionOf returns the partition holding consumer payments' message id.
func (b *testBundle) partitionOf(t *testing.T, id string) string {
	t.Helper()
	var table string
	require.NoError(t, b.pool.QueryRow(context.Background(), ident.Render(
		"SELECT tableoid::regclass::text FROM /* schema */inbox WHERE consumer = 'payments' AND message_id = $1", b.schema), id).Scan(&table))
	return table[strings.LastIndexByte(table, '.')+1:]
}

func msg(id string) inbox.Message {
	return inbox.Message{ID: id, EventType: "OrderPlaced", Payload: []byte(`{"order":"` + id + `"}`)}
}

func TestReceiveStoresOnceAndReportsDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})

	m := msg("order-1")
	m.Metadata = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "note": `quote " and <html> & ünïcode`}
	out, err := in.Receive(ctx, m)
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out)

	for range 3 {
		out, err = in.Receive(ctx, m)
		require.NoError(t, err, "a duplicate is not an error")
		require.Equal(t, inbox.Duplicate, out)
	}
	require.Equal(t, 1, b.count(t))

	r := b.row(t, "payments", "order-1")
	require.Equal(t, "pending", r.Status)
	require.Equal(t, "OrderPlaced", r.EventType)
	require.Equal(t, m.Payload, r.Payload)
	require.Equal(t, m.Metadata, r.Metadata)
	require.Zero(t, r.Attempts)
	require.Equal(t, inbox.MaxAttemptsDefault, r.MaxAttempts)
	require.Nil(t, r.OrderingKey)
	require.Empty(t, b.conflicts(t, "payments", "order-1"))
}

func TestReceiveReportsAndCountsPayloadConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})

	original := msg("order-1")
	_, err := in.Receive(ctx, original)
	require.NoError(t, err)

	changed := original
	changed.Payload = []byte(`{"order":"order-1","amount":999}`)
	for i := 1; i <= 2; i++ {
		out, err := in.Receive(ctx, changed)
		require.Equal(t, inbox.Conflict, out)
		require.ErrorIs(t, err, inbox.ErrPayloadConflict)
		var cerr *inbox.ConflictError
		require.ErrorAs(t, err, &cerr)
		require.Equal(t, "order-1", cerr.MessageID)
		require.Equal(t, "payments", cerr.Consumer)

		r := b.row(t, "payments", "order-1")
		require.Equal(t, original.Payload, r.Payload, "a conflict must never overwrite the stored message")
		require.Len(t, b.conflicts(t, "payments", "order-1"), i)
	}
	require.Equal(t, changed.Payload, b.conflicts(t, "payments", "order-1")[0], "the conflicting payload is kept for operators")
}

// Recording a conflict only appends: it does not wait for a dispatcher
// that holds the stored row locked while it handles it.
func TestConflictIsRecordedWhileTheRowIsBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})
	_, err := in.Receive(ctx, msg("m"))
	require.NoError(t, err)

	busy, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = busy.Rollback(ctx) }()
	_, err = busy.Exec(ctx, ident.Render("SELECT 1 FROM /* schema */inbox WHERE message_id = 'm' FOR NO KEY UPDATE", b.schema))
	require.NoError(t, err)

	changed := msg("m")
	changed.Payload = []byte("changed")
	shortCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := in.Receive(shortCtx, changed)
	require.Equal(t, inbox.Conflict, out)
	require.ErrorIs(t, err, inbox.ErrPayloadConflict, "the conflict must be recorded without waiting for the row")
	require.Len(t, b.conflicts(t, "payments", "m"), 1)
}

func TestPayloadBytesRoundTripExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})

	every := make([]byte, 0, 512)
	for i := range 512 {
		every = append(every, byte(i)) // every byte value, NUL and 0xff included, twice
	}
	for id, payload := range map[string][]byte{
		"every-byte": every,
		"empty":      {},
		"nil":        nil,
		"not-utf8":   {0xc3, 0x28, 0xa0, 0xa1, 0x00, 0xff},
	} {
		m := msg(id)
		m.Payload = payload
		out, err := in.Receive(ctx, m)
		require.NoError(t, err)
		require.Equal(t, inbox.Accepted, out)
		got := b.row(t, "payments", id).Payload
		require.Equal(t, len(payload), len(got), id)
		if len(payload) > 0 {
			require.Equal(t, payload, got, id)
		}

		out, err = in.Receive(ctx, m)
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, out, "the same bytes again are a duplicate, not a conflict: %s", id)
	}
}

func TestConsumersDedupeSeparately(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	payments, b := setup(t, inbox.Config{Consumer: "payments"})
	shipping, err := inbox.New(b.pool, inbox.Config{Consumer: "shipping", Schema: b.schema})
	require.NoError(t, err)

	for _, in := range []*inbox.Inbox{payments, shipping} {
		out, err := in.Receive(ctx, msg("order-1"))
		require.NoError(t, err)
		require.Equal(t, inbox.Accepted, out, in.Consumer())
	}
	require.Equal(t, 2, b.count(t))
}

// The inbox's INSERTs name no conflict target (see receiveSQL), which is
// right only while the primary key is the inbox's one unique index, in
// every partition: one more would make a receive skip a new message that
// collides on it, silently. Checked on the partitions the migration makes
// and on one made later, for a new generation.
func TestTheInboxPrimaryKeyIsItsOnlyUniqueIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := setup(t, inbox.Config{})
	require.NoError(t, partition.StartGeneration(ctx, b.pool, b.schema, 0, time.Second))
	rows, err := b.pool.Query(ctx, `
		SELECT t.relname, x.indexrelid::regclass::text, x.indisprimary
		FROM pg_class AS t
		JOIN pg_namespace AS n ON n.oid = t.relnamespace
		JOIN pg_index AS x ON x.indrelid = t.oid
		WHERE n.nspname = $1 AND (t.relname = 'inbox' OR t.oid IN (
		          SELECT inhrelid FROM pg_inherits WHERE inhparent = (quote_ident($1) || '.inbox')::regclass))
		  AND (x.indisunique OR x.indisexclusion)
		ORDER BY 1`, b.schema)
	require.NoError(t, err)
	type index struct {
		Table, Index string
		Primary      bool
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[index])
	require.NoError(t, err)
	tables := map[string]bool{}
	for _, ix := range indexes {
		require.True(t, ix.Primary, "%s has a unique index besides its primary key: %s", ix.Table, ix.Index)
		tables[ix.Table] = true
	}
	require.Contains(t, tables, "inbox")
	require.Contains(t, tables, partition.Inbox.GenerationPartition(1).Name, "the new generation's partition is checked")
	require.Greater(t, len(tables), 3, "the parent, the generations, the days and the default partition: %v", tables)
}

// Without the inbox's row of the partitioning table no receive can place
// a message in a partition. Each one says so, and nothing is stored:
// neither reported accepted while nothing was written, nor, for a single
// message, taken for a duplicate that has just expired.
func TestALostPartitioningRowFailsEveryReceive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})
	_, err := b.pool.Exec(ctx, ident.Render("DELETE FROM /* schema */partitioning WHERE table_name = 'inbox'", b.schema))
	require.NoError(t, err)
	dated := partition.IDAt(time.Now()).String()

	_, err = in.ReceiveBatch(ctx, []inbox.Message{msg("order-1"), msg(dated)})
	require.ErrorContains(t, err, "nothing was stored: "+b.schema+".partitioning has no row for the inbox")
	for _, id := range []string{"order-2", dated} {
		_, err = in.Receive(ctx, msg(id))
		require.ErrorContains(t, err, "partitioning has no row for the inbox", id)
	}
	require.Zero(t, b.count(t))
}

// A single receive does not probe the earlier generations unless the
// message needs it: until the inbox is seen past generation 0, it stores
// with an INSERT that places an undated message in generation 0 only. The
// first new undated message past it is stored all the same (with a second
// INSERT, after the duplicate check found nothing), in the current
// generation; from then on an undated message goes straight to the INSERT
// that probes, and a dated one still to the one that does not. A
// redelivery from an earlier generation is still found.
func TestUndatedMessagesPastGenerationZeroAreStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, counter := countingPool(t)
	counter.skip = notify.SendSQL // sent after a receive, when a timer says
	schema := pgtest.Schema(t)
	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema, RecentIDs: -1})
	require.NoError(t, err)
	b := &testBundle{pool: pool, schema: schema}

	out, err := in.Receive(ctx, msg("before")) // in generation 0
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out)
	require.NoError(t, partition.StartGeneration(ctx, pool, schema, 0, time.Second))

	receive := func(id string) (inbox.Outcome, int64) {
		t.Helper()
		before := counter.n.Load()
		out, err := in.Receive(ctx, msg(id))
		require.NoError(t, err, id)
		return out, counter.n.Load() - before
	}
	dated := partition.IDAt(time.Now()).String()
	for _, step := range []struct {
		id         string
		want       inbox.Outcome
		statements int64
		partition  string
	}{
		{"before", inbox.Duplicate, 2, "inbox_g0"},    // found in generation 0 by the duplicate check
		{"first-past", inbox.Accepted, 4, "inbox_g1"}, // INSERT, duplicate check, partitioning row, INSERT again
		{"second-past", inbox.Accepted, 1, "inbox_g1"},
		{dated, inbox.Accepted, 1, ""},
	} {
		out, n := receive(step.id)
		require.Equal(t, step.want, out, step.id)
		require.Equal(t, step.statements, n, "statements for %s", step.id)
		if step.partition != "" {
			require.Equal(t, step.partition, b.partitionOf(t, step.id), step.id)
		}
	}
	require.Equal(t, 4, b.count(t))
}

func TestBadInputIsRejectedAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{MaxPayloadBytes: 16})

	withMeta := func(k, v string) inbox.Message {
		m := msg("m")
		m.Payload = nil
		m.Metadata = map[string]string{k: v}
		return m
	}
	cases := map[string]struct {
		msg  inbox.Message
		want string
	}{
		"empty id":            {inbox.Message{EventType: "E"}, "ID is empty"},
		"id too long":         {inbox.Message{ID: strings.Repeat("x", 256), EventType: "E"}, "ID is 256 bytes, over the 255-byte limit"},
		"id not utf8":         {inbox.Message{ID: "a\xffb", EventType: "E"}, "ID is not valid UTF-8"},
		"id with NUL":         {inbox.Message{ID: "a\x00b", EventType: "E"}, "ID contains a NUL character"},
		"no event type":       {inbox.Message{ID: "m"}, "EventType is empty: set it so the dispatcher can route the message"},
		"event type with NUL": {inbox.Message{ID: "m", EventType: "E\x00"}, "EventType contains a NUL character"},
		"ordering key long":   {inbox.Message{ID: "m", EventType: "E", OrderingKey: strings.Repeat("k", 300)}, "OrderingKey is 300 bytes"},
		"payload over limit":  {inbox.Message{ID: "m", EventType: "E", Payload: make([]byte, 17)}, "payload is 17 bytes, over the 16-byte limit"},
		"metadata NUL value":  {withMeta("k", "a\x00"), `metadata "k" holds a NUL character, which PostgreSQL's jsonb cannot store`},
		"metadata NUL key":    {withMeta("k\x00", "v"), "holds a NUL character"},
		"metadata not utf8":   {withMeta("k", "\xff"), `metadata "k" holds invalid UTF-8`},
		"negative attempts":   {inbox.Message{ID: "m", EventType: "E", MaxAttempts: -1}, "MaxAttempts is -1"},
	}
	for name, tc := range cases {
		out, err := in.Receive(ctx, tc.msg)
		require.ErrorIs(t, err, inbox.ErrInvalidMessage, name)
		require.ErrorContains(t, err, tc.want, name)
		require.Zero(t, out, name)

		res, err := in.ReceiveBatch(ctx, []inbox.Message{tc.msg})
		require.NoError(t, err, name)
		require.ErrorIs(t, res[0].Err, inbox.ErrInvalidMessage, name)

		called := false
		_, err = in.Process(ctx, tc.msg, func(context.Context, pgx.Tx) error { called = true; return nil })
		require.ErrorIs(t, err, inbox.ErrInvalidMessage, name)
		require.False(t, called, "Process must not run the handler for an invalid message: %s", name)
	}
	require.Zero(t, b.count(t), "nothing may be written for bad input")

	_, err := in.Receive(ctx, inbox.Message{ID: "m", EventType: "E", Payload: make([]byte, 16)})
	require.NoError(t, err, "a payload exactly at the limit is accepted")
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	_, err := inbox.New(nil, inbox.Config{Consumer: "c"})
	require.ErrorContains(t, err, "pool is nil")
	for want, cfg := range map[string]inbox.Config{
		"Config.Consumer is empty: set it: name the consuming service":     {},
		"Config.Consumer is 256 bytes":                                     {Consumer: strings.Repeat("c", 256)},
		"Config.MaxAttempts is -1":                                         {Consumer: "c", MaxAttempts: -1},
		"Config.MaxPayloadBytes is -2":                                     {Consumer: "c", MaxPayloadBytes: -2},
		"Config.Schema: schema name \"bad\\x00\" contains a NUL character": {Consumer: "c", Schema: "bad\x00"},
	} {
		_, err := inbox.New(pool, cfg)
		require.ErrorContains(t, err, want)
	}
}

func TestReceiveBatchIsolatesEachMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})

	_, err := in.ReceiveBatch(ctx, []inbox.Message{msg("dup"), msg("conf")})
	require.NoError(t, err)

	conf := msg("conf")
	conf.Payload = []byte("other")
	bad := msg("bad")
	bad.EventType = ""
	new2Changed := msg("new-2")
	new2Changed.Payload = []byte("changed")

	res, err := in.ReceiveBatch(ctx, []inbox.Message{msg("new-1"), msg("dup"), conf, bad, msg("new-2"), msg("new-1"), new2Changed})
	require.NoError(t, err)
	require.Len(t, res, 7)

	want := []inbox.Outcome{inbox.Accepted, inbox.Duplicate, inbox.Conflict, 0, inbox.Accepted, inbox.Duplicate, inbox.Conflict}
	for i, w := range want {
		require.Equal(t, w, res[i].Outcome, "message %d", i)
	}
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	require.ErrorIs(t, res[2].Err, inbox.ErrPayloadConflict)
	require.ErrorIs(t, res[3].Err, inbox.ErrInvalidMessage)
	require.ErrorIs(t, res[6].Err, inbox.ErrPayloadConflict)

	require.Equal(t, 4, b.count(t), "dup, conf, new-1 and new-2")
	require.Nil(t, b.row(t, "payments", "bad"))
	require.Len(t, b.conflicts(t, "payments", "conf"), 1)
	require.Len(t, b.conflicts(t, "payments", "new-2"), 1)
	require.Equal(t, msg("new-2").Payload, b.row(t, "payments", "new-2").Payload, "the first occurrence wins")
}

func TestReceiveTxFollowsTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	out, err := in.ReceiveTx(ctx, tx, msg("rolled-back"))
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out)
	res, err := in.ReceiveBatchTx(ctx, tx, []inbox.Message{msg("rolled-back-2")})
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, res[0].Outcome)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, b.count(t))

	tx, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = in.ReceiveTx(ctx, tx, msg("committed"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.NotNil(t, b.row(t, "payments", "committed"))
}

// Sixteen sessions deliver the same id at the same moment: exactly one
// stores it, the rest are told it is a duplicate, and the handler run by
// Process commits its effect once.
func TestConcurrentDuplicateDeliveriesOnSeparateConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := setup(t, inbox.Config{})
	_, err := b.pool.Exec(ctx, ident.Render("CREATE TABLE /* schema */effects (message_id text NOT NULL)", b.schema))
	require.NoError(t, err)

	const sessions = 16
	inboxes := make([]*inbox.Inbox, sessions)
	for i := range inboxes {
		var err error
		inboxes[i], err = inbox.New(pgtest.NewPool(t, 1), inbox.Config{Consumer: "payments", Schema: b.schema})
		require.NoError(t, err)
	}

	deliverAll := func(id string, deliver func(in *inbox.Inbox) (inbox.Outcome, error)) map[inbox.Outcome]int {
		var (
			mu       sync.Mutex
			outcomes = map[inbox.Outcome]int{}
			wg       sync.WaitGroup
			start    = make(chan struct{})
		)
		for _, in := range inboxes {
			wg.Go(func() {
				<-start
				out, err := deliver(in)
				require.NoError(t, err)
				mu.Lock()
				outcomes[out]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		return outcomes
	}

	for round := range 10 {
		id := "receive-" + string(rune('a'+round))
		outcomes := deliverAll(id, func(in *inbox.Inbox) (inbox.Outcome, error) { return in.Receive(ctx, msg(id)) })
		require.Equal(t, map[inbox.Outcome]int{inbox.Accepted: 1, inbox.Duplicate: sessions - 1}, outcomes, id)
	}

	for round := range 10 {
		id := "process-" + string(rune('a'+round))
		outcomes := deliverAll(id, func(in *inbox.Inbox) (inbox.Outcome, error) {
			return in.Process(ctx, msg(id), func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, ident.Render("INSERT INTO /* schema */effects VALUES ($1)", b.schema), id)
				return err
			})
		})
		require.Equal(t, map[inbox.Outcome]int{inbox.Accepted: 1, inbox.Duplicate: sessions - 1}, outcomes, id)
	}

	require.Equal(t, 20, b.count(t))
	var effects, distinct int
	require.NoError(t, b.pool.QueryRow(ctx, ident.Render("SELECT count(*), count(DISTINCT message_id) FROM /* schema */effects", b.schema)).Scan(&effects, &distinct))
	require.Equal(t, 10, effects, "each handler effect exactly once")
	require.Equal(t, 10, distinct)
}

func TestProcessRunsTheHandlerOnceInTheSameTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})
	_, err := b.pool.Exec(ctx, ident.Render("CREATE TABLE /* schema */effects (message_id text NOT NULL)", b.schema))
	require.NoError(t, err)
	effects := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, ident.Render("SELECT count(*) FROM /* schema */effects", b.schema)).Scan(&n))
		return n
	}
	write := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, ident.Render("INSERT INTO /* schema */effects VALUES ('x')", b.schema))
		return err
	}

	// A failing handler leaves nothing behind, so a redelivery runs it again.
	boom := func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, write(ctx, tx))
		return context.DeadlineExceeded
	}
	out, err := in.Process(ctx, msg("m"), boom)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, out)
	require.Zero(t, effects())
	require.Nil(t, b.row(t, "payments", "m"))

	require.Panics(t, func() {
		_, _ = in.Process(ctx, msg("m"), func(ctx context.Context, tx pgx.Tx) error {
			require.NoError(t, write(ctx, tx))
			panic("handler bug")
		})
	})
	require.Zero(t, effects())
	require.Nil(t, b.row(t, "payments", "m"))

	out, err = in.Process(ctx, msg("m"), write)
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out)
	require.Equal(t, 1, effects())
	r := b.row(t, "payments", "m")
	require.Equal(t, "done", r.Status)
	require.Equal(t, 1, r.Attempts)
	require.NotNil(t, r.ProcessedAt)

	called := false
	out, err = in.Process(ctx, msg("m"), func(context.Context, pgx.Tx) error { called = true; return nil })
	require.NoError(t, err)
	require.Equal(t, inbox.Duplicate, out)
	require.False(t, called)

	changed := msg("m")
	changed.Payload = []byte("changed")
	out, err = in.Process(ctx, changed, func(context.Context, pgx.Tx) error { called = true; return nil })
	require.ErrorIs(t, err, inbox.ErrPayloadConflict)
	require.Equal(t, inbox.Conflict, out)
	require.False(t, called)
	require.Equal(t, 1, effects())
	require.Len(t, b.conflicts(t, "payments", "m"), 1, "Process must keep the conflict's record, not roll it back")
}

// Two deliveries of the same batch in opposite orders, at once: they must
// wait for each other in one order, not deadlock. Batches with ordering keys
// and batches without go through different statements, which must insert
// in the same order too.
func TestOverlappingBatchesInOppositeOrderDoNotDeadlock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		keyed [2]bool // whether the forward and the backward delivery carry ordering keys
	}{
		{"without keys", [2]bool{false, false}},
		{"with keys", [2]bool{true, true}},
		{"one with keys, one without", [2]bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			in, b := setup(t, inbox.Config{})
			for round := range 20 {
				deliveries := make([][]inbox.Message, 2)
				for d := range deliveries {
					for i := range 200 {
						m := msg(fmt.Sprintf("r%02d-%03d", round, i))
						if tc.keyed[d] {
							m.OrderingKey = fmt.Sprintf("key-%d", i%7)
						}
						deliveries[d] = append(deliveries[d], m)
					}
				}
				slices.Reverse(deliveries[1])

				accepted := make([]int, 2)
				var wg sync.WaitGroup
				for i, batch := range deliveries {
					wg.Go(func() {
						res, err := in.ReceiveBatch(ctx, batch)
						require.NoError(t, err)
						for _, r := range res {
							require.NoError(t, r.Err)
							if r.Outcome == inbox.Accepted {
								accepted[i]++
							}
						}
					})
				}
				wg.Wait()
				require.Equal(t, 200, accepted[0]+accepted[1], "each message accepted once between the two deliveries")
			}
			require.Equal(t, 20*200, b.count(t))
		})
	}
}

// Arrival order within a batch is the batch's order, although rows are
// inserted in id order.
func TestArrivalOrderFollowsTheBatchNotTheIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})
	ids := []string{"z", "a", "m", "b"}
	msgs := make([]inbox.Message, len(ids))
	for i, id := range ids {
		msgs[i] = msg(id)
		msgs[i].OrderingKey = "k"
	}
	_, err := in.ReceiveBatch(ctx, msgs)
	require.NoError(t, err)
	for i := 1; i < len(ids); i++ {
		require.Less(t, b.row(t, "payments", ids[i-1]).Seq, b.row(t, "payments", ids[i]).Seq, "%s before %s", ids[i-1], ids[i])
	}
}

// listen returns a connection listening on the schema's inbox channel.
func listen(t *testing.T, schema string) *pgx.Conn {
	t.Helper()
	return pgtest.Listen(t, ident.Channel(schema, "inbox"))
}

func nextNotification(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	require.NoError(t, err)
	return n.Payload
}

// Notifications announce committed new work only, once per statement. Each
// check below is followed by a committed receive for a marker consumer:
// notifications arrive in commit order, so the marker's arriving first
// proves nothing was sent before it.
func TestNotifiesOnlyCommittedNewWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{NotifyInterval: -1}) // every statement may notify: nothing is folded
	marker, err := inbox.New(b.pool, inbox.Config{Consumer: "marker", Schema: b.schema, NotifyInterval: -1})
	require.NoError(t, err)
	conn := listen(t, b.schema)

	_, err = in.ReceiveBatch(ctx, []inbox.Message{msg("a"), msg("b"), msg("c")})
	require.NoError(t, err)
	require.Equal(t, "payments", nextNotification(t, conn))

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = in.ReceiveTx(ctx, tx, msg("committed"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "payments", nextNotification(t, conn), "a committed ReceiveTx must announce its message")

	tx, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = in.ReceiveTx(ctx, tx, msg("rolled-back"))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = in.Receive(ctx, msg("a")) // a duplicate
	require.NoError(t, err)
	_, err = in.Process(ctx, msg("processed"), func(context.Context, pgx.Tx) error { return nil }) // done, nothing to dispatch
	require.NoError(t, err)

	_, err = marker.Receive(ctx, msg("marker-1"))
	require.NoError(t, err)
	require.Equal(t, "marker", nextNotification(t, conn), "a rollback, a duplicate or a processed message must not notify")
}

// By default an Inbox folds its notifications: statements within one
// NotifyInterval of a notification send none.
func TestNotificationsAreFolded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{NotifyInterval: time.Hour})
	marker, err := inbox.New(b.pool, inbox.Config{Consumer: "marker", Schema: b.schema, NotifyInterval: -1})
	require.NoError(t, err)
	conn := listen(t, b.schema)

	for i := range 5 {
		_, err := in.Receive(ctx, msg(fmt.Sprint("m-", i)))
		require.NoError(t, err)
	}
	_, err = marker.Receive(ctx, msg("marker-1"))
	require.NoError(t, err)
	// An autocommitted receive's notification is sent from a goroutine
	// of its own (notify.Limiter.Committed), so the two may arrive in
	// either order. A second marker, received after every receive had
	// returned, closes the count.
	seen := map[string]int{}
	for seen["payments"] == 0 || seen["marker"] == 0 {
		seen[nextNotification(t, conn)]++
	}
	_, err = marker.Receive(ctx, msg("marker-2"))
	require.NoError(t, err)
	for seen["marker"] < 2 {
		seen[nextNotification(t, conn)]++
	}
	require.Equal(t, map[string]int{"payments": 1, "marker": 2}, seen, "five receives within the interval notify once")
}

// Receivers of one ordering key take turns, so the arrival sequence of a
// key's messages is their commit order: a transaction that received first
// but commits last cannot slip in behind a later message.
func TestOrderingKeyReceiversTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})

	keyed := func(id, key string) inbox.Message { m := msg(id); m.OrderingKey = key; return m }

	tx1, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = in.ReceiveTx(ctx, tx1, keyed("first", "order-7"))
	require.NoError(t, err)

	// Another key is not held up by tx1.
	_, err = in.Receive(ctx, keyed("other-key", "order-8"))
	require.NoError(t, err)

	tx2, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	var pid2 uint32
	require.NoError(t, tx2.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid2))
	done := make(chan error, 1)
	go func() {
		_, err := in.ReceiveTx(ctx, tx2, keyed("second", "order-7"))
		done <- err
	}()
	// On failure, end both transactions (tx1 first, which frees tx2) before
	// the schema is dropped, or the drop would wait on their locks.
	t.Cleanup(func() {
		_ = tx1.Rollback(ctx)
		<-done
		_ = tx2.Rollback(ctx)
	})

	// tx2 must wait on the key's lock while tx1 is open.
	require.Eventually(t, func() bool {
		var waiting bool
		err := b.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)", pid2).Scan(&waiting)
		require.NoError(t, err)
		return waiting
	}, 10*time.Second, 5*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("second receiver of the key finished while the first was uncommitted: %v", err)
	default:
	}

	require.NoError(t, tx1.Commit(ctx))
	err = <-done
	done <- err // for the cleanup
	require.NoError(t, err)
	require.NoError(t, tx2.Commit(ctx))

	first, second := b.row(t, "payments", "first"), b.row(t, "payments", "second")
	require.Less(t, first.Seq, second.Seq)
	require.Equal(t, "order-7", *first.OrderingKey)
}

func TestUnmigratedSchemaGetsAClearError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.EmptySchema(t)

	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema})
	require.NoError(t, err)
	_, err = in.Receive(ctx, msg("m"))
	require.ErrorIs(t, err, pgbox.ErrSchemaNotMigrated)
	require.ErrorContains(t, err, "run inboxctl migrate up")

	_, err = in.Process(ctx, msg("m"), func(context.Context, pgx.Tx) error { return nil })
	require.ErrorIs(t, err, pgbox.ErrSchemaNotMigrated)
}

// With its only pool connection held by Process's own transaction, the
// schema check after a failed statement cannot get a connection: it must
// give up after its own timeout and return the original error, not wait for
// ever.
func TestSchemaCheckCannotHangOnAFullPool(t *testing.T) {
	t.Parallel()
	schema := pgtest.EmptySchema(t)
	in, err := inbox.New(pgtest.NewPool(t, 1), inbox.Config{Consumer: "payments", Schema: schema})
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := in.Process(context.Background(), msg("m"), func(context.Context, pgx.Tx) error { return nil })
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "does not exist", "the original SQL error comes back when the check cannot run")
	case <-time.After(2 * time.Minute):
		t.Fatal("Process hung waiting for a second connection")
	}
}

func TestMetadataIsStoredAsJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})
	m := msg("m")
	m.Metadata = map[string]string{"a": "1", "emoji": "🧾", "empty": ""}
	_, err := in.Receive(ctx, m)
	require.NoError(t, err)

	var raw []byte
	require.NoError(t, b.pool.QueryRow(ctx, ident.Render("SELECT metadata FROM /* schema */inbox", b.schema)).Scan(&raw))
	var got map[string]string
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, m.Metadata, got)
}

// statements counts the statements a pool sends, but for skip's, when set.
type statements struct {
	n    atomic.Int64
	skip string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if s.skip == "" || data.SQL != s.skip {
		s.n.Add(1)
	}
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countingPool is a pool on the test database whose statements are counted.
func countingPool(t *testing.T) (*pgxpool.Pool, *statements) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	counter := &statements{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, counter
}

// A redelivery of a message this Inbox knows to be committed is answered
// without a round trip; one with another payload still reaches the
// database and is recorded as a conflict.
func TestRedeliveriesOfCommittedMessagesSkipTheDatabase(t *testing.T) {
	t.Parallel()
	pool, counter := countingPool(t)
	schema := pgtest.Schema(t)
	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema, NotifyInterval: -1})
	require.NoError(t, err)
	ctx := context.Background()
	conn := listen(t, schema)

	out, err := in.Receive(ctx, msg("a"))
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out)
	// The receive announces "a" after its commit, in a statement of its
	// own: count from when it has been sent.
	require.Equal(t, "payments", nextNotification(t, conn))
	before := counter.n.Load()
	for range 10 {
		out, err := in.Receive(ctx, msg("a"))
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, out)
	}
	res, err := in.ReceiveBatch(ctx, []inbox.Message{msg("a"), msg("a")})
	require.NoError(t, err)
	require.Equal(t, []inbox.Result{{Outcome: inbox.Duplicate}, {Outcome: inbox.Duplicate}}, res)
	require.Equal(t, before, counter.n.Load(), "redeliveries of a committed message must not reach the database")

	changed := msg("a")
	changed.Payload = []byte(`{"order":"changed"}`)
	out, err = in.Receive(ctx, changed)
	require.Equal(t, inbox.Conflict, out)
	require.ErrorIs(t, err, inbox.ErrPayloadConflict)
	require.Greater(t, counter.n.Load(), before)
	b := &testBundle{pool: pool, schema: schema}
	require.Len(t, b.conflicts(t, "payments", "a"), 1)
	require.Equal(t, 1, b.count(t))
}

// Only committed ids are remembered: a message stored by ReceiveTx in a
// transaction that rolled back is new when it comes again, and so is every
// redelivery when the Inbox remembers nothing.
func TestOnlyCommittedMessagesAreRemembered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, b := setup(t, inbox.Config{})
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	out, err := in.ReceiveTx(ctx, tx, msg("rolled-back"))
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out)
	out, err = in.ReceiveTx(ctx, tx, msg("rolled-back"))
	require.NoError(t, err)
	require.Equal(t, inbox.Duplicate, out) // of its own, uncommitted row
	require.NoError(t, tx.Rollback(ctx))
	out, err = in.Receive(ctx, msg("rolled-back"))
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out, "a rolled-back message must be stored when it comes again")

	pool, counter := countingPool(t)
	forgetful, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: b.schema, RecentIDs: -1})
	require.NoError(t, err)
	before := counter.n.Load()
	for range 3 {
		out, err := forgetful.Receive(ctx, msg("rolled-back"))
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, out)
	}
	// Each redelivery: the insert that finds the id taken, then the read
	// of the stored payload hash it is compared with.
	require.Equal(t, before+3*2, counter.n.Load())
}

// Process answers a redelivery it knows to be committed without a
// transaction, as Receive does: one it stored itself, and one another
// process stored, which it remembers once the database has said so.
func TestProcessSkipsTheDatabaseForRememberedRedeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, counter := countingPool(t)
	schema := pgtest.Schema(t)
	newInbox := func() *inbox.Inbox {
		in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema})
		require.NoError(t, err)
		return in
	}
	calls := 0
	handle := func(context.Context, pgx.Tx) error { calls++; return nil }

	here, elsewhere := newInbox(), newInbox()
	out, err := here.Process(ctx, msg("m"), handle)
	require.NoError(t, err)
	require.Equal(t, inbox.Accepted, out)
	before := counter.n.Load()
	out, err = elsewhere.Process(ctx, msg("m"), handle)
	require.NoError(t, err)
	require.Equal(t, inbox.Duplicate, out)
	require.Greater(t, counter.n.Load(), before, "elsewhere has not seen m: the database answers")

	before = counter.n.Load()
	for _, in := range []*inbox.Inbox{here, elsewhere, here, elsewhere} {
		out, err := in.Process(ctx, msg("m"), handle)
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, out)
	}
	require.Equal(t, before, counter.n.Load(), "redeliveries of a remembered message must not reach the database")
	require.Equal(t, 1, calls)

	changed := msg("m")
	changed.Payload = []byte(`{"order":"changed"}`)
	out, err = here.Process(ctx, changed, handle)
	require.ErrorIs(t, err, inbox.ErrPayloadConflict, "only the same payload is a remembered duplicate")
	require.Equal(t, inbox.Conflict, out)
	require.Equal(t, 1, calls)
}

// A redelivery of a message the Inbox has forgotten goes to the database,
// and must not push out a message stored after it: otherwise every miss
// makes another, and a storm of redeliveries of as many recent messages as
// the Inbox remembers goes to the database more and more.
func TestAForgottenRedeliveryKeepsTheRecentRemembered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, counter := countingPool(t)
	schema := pgtest.Schema(t)
	// One notification, sent at once for the first message; the others'
	// fold into one due in an hour, after the test.
	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema, RecentIDs: 3, NotifyInterval: time.Hour})
	require.NoError(t, err)
	conn := listen(t, schema)
	for _, id := range []string{"m1", "m2", "m3", "m4"} { // m1 is forgotten
		out, err := in.Receive(ctx, msg(id))
		require.NoError(t, err)
		require.Equal(t, inbox.Accepted, out)
	}
	require.Equal(t, "payments", nextNotification(t, conn)) // sent: count from here
	before := counter.n.Load()
	out, err := in.Receive(ctx, msg("m1"))
	require.NoError(t, err)
	require.Equal(t, inbox.Duplicate, out)
	require.Equal(t, before+2, counter.n.Load(), "the forgotten m1: an insert, then its stored hash")
	for _, id := range []string{"m2", "m3", "m4", "m2"} {
		out, err := in.Receive(ctx, msg(id))
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, out)
	}
	require.Equal(t, before+2, counter.n.Load(), "m2, m3 and m4 are still remembered")
}

// An autocommitted Receive announces its message after its commit, in a
// notification of its own, instead of inside its statement: a NOTIFY there
// would make the receive's commit queue on PostgreSQL's notification lock
// behind every other notifying commit. The receive statement carries no
// channel, and the listener still hears of the message.
func TestAutocommittedReceiveNotifiesAfterItsCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := setup(t, inbox.Config{})
	var mu sync.Mutex
	var notifying []bool // per receive statement: whether it could NOTIFY
	pool := pgtest.TracedPool(t, b.pool, pgtest.QueryArgs(func(sql string, args []any) {
		if !strings.Contains(sql, "INSERT INTO") {
			return
		}
		channel := false
		for _, a := range args {
			if c, ok := a.(*string); ok && c != nil { // the one *string argument
				channel = true
			}
		}
		mu.Lock()
		notifying = append(notifying, channel && strings.Contains(sql, "pg_notify"))
		mu.Unlock()
	}))
	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: b.schema, NotifyInterval: time.Hour})
	require.NoError(t, err)
	conn := listen(t, b.schema)

	_, err = in.Receive(ctx, msg("a"))
	require.NoError(t, err)
	require.Equal(t, "payments", nextNotification(t, conn))
	_, err = in.ReceiveBatch(ctx, []inbox.Message{msg("b"), msg("c")})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{false, false}, notifying, "an autocommitted receive statement must not NOTIFY")
}
