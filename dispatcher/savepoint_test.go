package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/dispatcher"
)

// A handler that ignores a failed statement and returns nil cannot commit
// its writes: its attempt fails (and its writes are undone) while its
// neighbours in the batch, before and after it, are done.
func TestHandlerIgnoringItsFailedStatementFailsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.receive(t, "a", "bad", "c")
	b.start(t, dispatcher.Config{
		// One worker, so that the three share a batch transaction: several
		// workers' claims may split them.
		BatchSize: 3,
		Workers:   1,
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
			if err := b.recordEffect(ctx, tx, m); err != nil {
				return err
			}
			if m.ID == "bad" && m.Attempt == 1 {
				_, _ = tx.Exec(ctx, "SELECT 1/0") // the error is dropped
			}
			return nil
		})},
	})
	b.waitSettled(t)
	for _, id := range []string{"a", "bad", "c"} {
		r := b.row(t, id)
		require.Equal(t, "done", r.Status, id)
	}
	bad := b.row(t, "bad")
	require.Equal(t, 2, bad.Attempts)
	require.Contains(t, *bad.LastError, "one of its statements failed and aborted the transaction")
	require.Equal(t, map[string]int{"a": 1, "bad": 1, "c": 1}, b.effects(t), "the failed attempt's effect must be undone")
}

// Every way into the transaction (Exec, Query, QueryRow, SendBatch,
// CopyFrom, a nested Begin, Conn) is inside the handler's savepoint: a
// failing handler's writes through any of them are undone, and the
// neighbour that used none of them is done.
func TestEveryWayIntoTheTransactionIsInsideTheSavepoint(t *testing.T) {
	t.Parallel()
	ways := map[string]func(ctx context.Context, tx pgx.Tx, table pgx.Identifier, sql string, args ...any) error{
		"exec": func(ctx context.Context, tx pgx.Tx, table pgx.Identifier, sql string, args ...any) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		},
		"query": func(ctx context.Context, tx pgx.Tx, table pgx.Identifier, sql string, args ...any) error {
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		},
		"queryrow": func(ctx context.Context, tx pgx.Tx, table pgx.Identifier, sql string, args ...any) error {
			var n int
			err := tx.QueryRow(ctx, sql+" RETURNING 1", args...).Scan(&n)
			return err
		},
		"batch": func(ctx context.Context, tx pgx.Tx, table pgx.Identifier, sql string, args ...any) error {
			batch := &pgx.Batch{}
			batch.Queue(sql, args...)
			return tx.SendBatch(ctx, batch).Close()
		},
		"nested": func(ctx context.Context, tx pgx.Tx, table pgx.Identifier, sql string, args ...any) error {
			inner, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := inner.Exec(ctx, sql, args...); err != nil {
				return err
			}
			return inner.Commit(ctx)
		},
		"copy": func(ctx context.Context, tx pgx.Tx, table pgx.Identifier, _ string, args ...any) error {
			_, err := tx.CopyFrom(ctx, table, []string{"message_id", "attempt"}, pgx.CopyFromRows([][]any{args}))
			return err
		},
		"conn": func(ctx context.Context, tx pgx.Tx, table pgx.Identifier, sql string, args ...any) error {
			_, err := tx.Conn().Exec(ctx, sql, args...)
			return err
		},
	}
	for name, write := range ways {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.receive(t, "fails", "quiet")
			insert := b.sql("INSERT INTO /* schema */effects (message_id, attempt) VALUES ($1, $2)")
			b.start(t, dispatcher.Config{
				BatchSize: 2,
				Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
					if m.ID == "quiet" {
						return nil // touches nothing: no savepoint at all
					}
					if err := write(ctx, tx, pgx.Identifier{b.schema, "effects"}, insert, m.ID, m.Attempt); err != nil {
						return err
					}
					if m.Attempt == 1 {
						return errors.New("fails after writing")
					}
					return nil
				})},
			})
			b.waitSettled(t)
			require.Equal(t, "done", b.row(t, "quiet").Status)
			require.Equal(t, "done", b.row(t, "fails").Status)
			var attempts []int
			rows, err := b.pool.Query(context.Background(), b.sql("SELECT attempt FROM /* schema */effects ORDER BY seq"))
			require.NoError(t, err)
			attempts, err = pgx.CollectRows(rows, pgx.RowTo[int])
			require.NoError(t, err)
			require.Equal(t, []int{2}, attempts, fmt.Sprintf("%s: the first attempt's write must be undone", name))
		})
	}
}
