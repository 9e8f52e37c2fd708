package dispatcher_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const consumer = "payments"

type testBundle struct {
	inbox  *inbox.Inbox
	pool   *pgxpool.Pool
	schema string
}

// setup gives a test its own migrated schema, an inbox for consumer
// "payments" and an effects table where handlers record what they did.
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{pool: pgtest.Pool(t), schema: pgtest.Schema(t)}
	var err error
	b.inbox, err = inbox.New(b.pool, inbox.Config{Consumer: consumer, Schema: b.schema})
	require.NoError(t, err)
	b.exec(t, `CREATE TABLE /* schema */effects (
		seq        bigserial PRIMARY KEY,
		message_id text NOT NULL,
		attempt    int,
		note       text,
		txid       bigint DEFAULT txid_current(),
		pid        int DEFAULT pg_backend_pid())`)
	return b
}

func (b *testBundle) sql(q string) string { return ident.Render(q, b.schema) }

func (b *testBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), b.sql(q), args...)
	require.NoError(t, err)
}

func (b *testBundle) scalar(t *testing.T, dst any, q string, args ...any) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(q), args...).Scan(dst))
}

// receive stores messages of type "OrderPlaced" with the given ids.
func (b *testBundle) receive(t *testing.T, ids ...string) {
	t.Helper()
	b.receiveAs(t, "OrderPlaced", ids...)
}

// receiveAs stores messages of eventType with the given ids, in order.
func (b *testBundle) receiveAs(t *testing.T, eventType string, ids ...string) {
	t.Helper()
	msgs := make([]inbox.Message, len(ids))
	for i, id := range ids {
		msgs[i] = inbox.Message{ID: id, EventType: eventType, Payload: []byte(id)}
	}
	b.receiveMsgs(t, msgs...)
}

func (b *testBundle) receiveMsgs(t *testing.T, msgs ...inbox.Message) {
	t.Helper()
	res, err := b.inbox.ReceiveBatch(context.Background(), msgs)
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err, msgs[i].ID)
	}
}

// config fills in what every test wants: this bundle's inbox (unless the
// test brings its own), quick polling and retries, and logs on the test's output.
func (b *testBundle) config(t *testing.T, cfg dispatcher.Config) dispatcher.Config {
	if cfg.Inbox == nil {
		cfg.Inbox = b.inbox
	}
	if cfg.ListenConnConfig == nil && !cfg.PollOnly {
		cfg.ListenConnConfig = pgtest.ListenConnConfig(t)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.RetryBackoffFunc == nil {
		cfg.RetryBackoffFunc = func(int) time.Duration { return 10 * time.Millisecond }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return cfg
}

// start creates and starts a dispatcher, stopped when the test ends.
func (b *testBundle) start(t *testing.T, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	d := b.newDispatcher(t, cfg)
	require.NoError(t, d.Start(context.Background()))
	return d
}

func (b *testBundle) newDispatcher(t *testing.T, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	d, err := dispatcher.New(b.pool, b.config(t, cfg))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, d.Stop(ctx))
	})
	return d
}

// waitFor polls the database until the boolean query q is true.
func (b *testBundle) waitFor(t *testing.T, q string, args ...any) {
	t.Helper()
	b.waitForWithin(t, 30*time.Second, q, args...)
}

// waitForWithin is waitFor with a limit of its own, for a wait as long as
// the work it waits for: a backlog's drain, whose time follows the
// machine's load.
func (b *testBundle) waitForWithin(t *testing.T, limit time.Duration, q string, args ...any) {
	t.Helper()
	require.Eventually(t, func() bool {
		var ok bool
		require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(q), args...).Scan(&ok))
		return ok
	}, limit, 10*time.Millisecond, "waiting for: %s", q)
}

// settledSQL is true when no message of the consumer is pending or running.
const settledSQL = "SELECT NOT EXISTS (SELECT 1 FROM /* schema */inbox WHERE status IN ('pending', 'running'))"

// waitSettled waits until no message of the consumer is pending or running.
func (b *testBundle) waitSettled(t *testing.T) {
	t.Helper()
	b.waitFor(t, settledSQL)
}

// attemptError is one entry of a row's errors history.
type attemptError struct {
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
	Trace   string    `json:"trace"`
}

type inboxRow struct {
	Attempts    int
	AvailableAt time.Time
	Errors      []attemptError
	LastError   *string
	ProcessedAt *time.Time
	Status      string
}

func (b *testBundle) row(t *testing.T, id string) inboxRow {
	t.Helper()
	var (
		r   inboxRow
		raw []byte
	)
	err := b.pool.QueryRow(context.Background(), b.sql(`
		SELECT attempts, available_at, errors, last_error, processed_at, status FROM /* schema */inbox
		WHERE consumer = $1 AND message_id = $2`), consumer, id).Scan(&r.Attempts, &r.AvailableAt, &raw, &r.LastError, &r.ProcessedAt, &r.Status)
	require.NoError(t, err, id)
	require.NoError(t, json.Unmarshal(raw, &r.Errors))
	return r
}

// effects counts the effects recorded for each message id.
func (b *testBundle) effects(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), b.sql("SELECT message_id, count(*) FROM /* schema */effects GROUP BY 1"))
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var (
			id string
			n  int
		)
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// recordEffect is an InTx handler body: it writes an effect row in the
// handler's transaction.
func (b *testBundle) recordEffect(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
	_, err := tx.Exec(ctx, b.sql("INSERT INTO /* schema */effects (message_id, attempt) VALUES ($1, $2)"), m.ID, m.Attempt)
	return err
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + "-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	return out
}
