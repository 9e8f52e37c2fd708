package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A TxPublisher publishes by writing to a table of the outbox's own
// database (package watermillsql's publisher, to watermill-sql's tables).
// The relay runs its statement in the batch transaction that claimed the
// rows: the messages commit with the rows' outcomes, or not at all. A
// row recorded published has its message in the table once; a relay
// that dies before its commit leaves neither, and the row is published
// again. The statement costs the batch one round trip, and no commit of
// its own. Config.AtomicPublisher does not apply to it.
type TxPublisher interface {
	message.Publisher
	// PublishQuery returns the statement that publishes msgs to topic,
	// all of them or none, when run in a transaction, and its arguments.
	// An error says the messages cannot be published (a topic the
	// publisher cannot name a table for): they are charged an attempt.
	PublishQuery(topic string, msgs ...*message.Message) (sql string, args []any, err error)
}

// publishSavepoint fences a TxPublisher's statement in the batch
// transaction: a statement that fails is undone alone, and the batch goes
// on to record its outcome.
const publishSavepoint = "pgbox_publish"

// publishInTx publishes one topic's rows through tp in the batch
// transaction, in one statement, and notes each row's outcome in rd. A
// statement refused is made again for each half of its rows, and so on
// down to the rows to blame, which fail alone: a few statements for a
// bad row among many, where one a row would leave a subtransaction for
// each good one (past 64, PostgreSQL's every snapshot taken meanwhile
// must look them up). A row whose key has an earlier row not published
// this round is handed back unpublished (a safeguard: the claim takes
// only the head of each key).
func (r *Relay) publishInTx(rd *round, tp TxPublisher, group []*row) {
	rows := make([]*row, 0, len(group))
	for _, rw := range group {
		if rd.held[rw.orderingKey] {
			rd.released(rw)
			continue
		}
		rows = append(rows, rw)
	}
	if len(rows) == 0 {
		return
	}
	if !r.canStart(rd) || rd.txLost {
		rd.released(rows...)
		return
	}
	err := r.insert(rd, tp, rows)
	rd.txLost = errors.Is(err, errTxLost)
	if len(rows) == 1 || r.classify(err) != refused || rd.txLost {
		r.note(rd, rows, err)
		return
	}
	rd.reached = true // the database answered: the statement is what it refused
	half := len(rows) / 2
	r.publishInTx(rd, tp, rows[:half])
	r.publishInTx(rd, tp, rows[half:])
}

// errTxLost is in the error of a statement after which the batch
// transaction could not be rolled back to the savepoint: the batch's
// outcomes will not be recorded, and nothing more is published in it.
var errTxLost = errors.New("the batch transaction is lost")

// insert runs tp's statement for rows in rd's batch transaction, within a
// savepoint, and returns its error. A statement that fails is rolled back
// to the savepoint; if that fails too, the batch transaction is lost, and
// so are its outcomes (the claim record counts the attempt).
func (r *Relay) insert(rd *round, tp TxPublisher, rows []*row) error {
	topic := rows[0].topic
	msgs := toMessages(rows)
	end := r.tel.Publishing(topic, msgs)
	err := r.execPublish(rd, tp, topic, msgs)
	end(func(int) error { return err })
	return err
}

// execPublish runs tp's statement for msgs in a savepoint of rd's batch
// transaction, and rolls back to it if the statement fails.
//
// The savepoint is already there, made in an earlier round trip: the
// claim's, for the batch's first statement, and each statement's own, made
// after it, for the next. A savepoint queued with its statement would not
// do: pgx prepares a new statement in a step of its own, and a statement
// that fails to prepare (a topic with no table) aborts the transaction
// before anything queued with it runs. So at most one savepoint of the
// name is on the stack, made after every statement that succeeded: a
// rollback to it undoes the failed statement alone, and keeps it for the
// next.
//
// The server ends the statement at PublishTimeout (publishTimeoutSQL,
// in force from the claim on, so a wait on a lock while pgx prepares the
// statement is ended too): a statement that waits on a lock, say, is then
// hung, its rows held back uncharged, as a broker's call that gets no
// answer. The client waits a little longer, as a last resort: pgx closes
// a connection whose query outlives its context, and with it the batch
// transaction and its outcomes.
func (r *Relay) execPublish(rd *round, tp TxPublisher, topic string, msgs []*message.Message) error {
	sql, args, err := tp.PublishQuery(topic, msgs...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.PublishTimeout+serverTimesOutFirst)
	defer cancel()
	var q pgx.Batch
	q.Queue(sql, args...)
	q.Queue("RELEASE SAVEPOINT " + publishSavepoint)
	q.Queue("SAVEPOINT " + publishSavepoint)
	err = rd.conn.SendBatch(ctx, &q).Close()
	if err == nil {
		return nil
	}
	rctx, rcancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer rcancel()
	if _, rerr := rd.conn.Exec(rctx, "ROLLBACK TO SAVEPOINT "+publishSavepoint); rerr != nil {
		return errors.Join(err, fmt.Errorf("%w: %w", errTxLost, rerr))
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "57014" { // query_canceled: the statement timeout
		return &hungError{timeout: r.cfg.PublishTimeout, topic: topic}
	}
	return err
}

// serverTimesOutFirst is how much longer than PublishTimeout the relay
// waits for a TxPublisher's statement, so that the server's timeout ends
// it first.
const serverTimesOutFirst = 2 * time.Second
