package admin

import (
	"context"
	"time"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

// An interrupted bulk change (its context done between two batches) may
// have had nothing left to do: the interruption came during its last
// batch. It is then complete, and is recorded as finished, not as
// interrupted with work left. A bulk change is over when a batch touched
// fewer rows than a batch holds (its scan found no more); after a full
// batch, it asks its leftSQL whether a row remains: beyond the last seq
// for a walk by seq (replay, discard), anywhere in its selection for the
// others (purge, outbox retry), whose changed rows leave the selection.

// replayLeftSQL reports whether a replayable message matching the filter
// remains above seq $12: what replayBatchSQL's next batch would replay.
const replayLeftSQL = `
SELECT EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE ` + filterSQL + ` AND ` + replayableSQL + ` AND i.seq > $12)`

// discardLeftSQL reports whether a dead message matching the filter
// remains above seq $12: what discardBatchSQL's next batch would discard.
const discardLeftSQL = `
SELECT EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE ` + filterSQL + ` AND i.status = ` + tables.InboxDead + ` AND i.seq > $12)`

// purgeLeftSQL reports whether a message Purge would delete remains: what
// purgeBatchSQL's next batch would delete. Its parameters are
// countPurgeableSQL's.
const purgeLeftSQL = `SELECT EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE ` + purgeableSQL + `)`

// outboxRetryLeftSQL reports whether a dead outbox row among ids $1 (NULL:
// any) remains: what outboxRetrySQL's next batch would retry.
const outboxRetryLeftSQL = `SELECT EXISTS (SELECT 1 FROM /* schema */outbox AS o WHERE ` + outboxRetryableSQL + `)`

// leftTimeout bounds stillLeft's question, asked after an interruption.
const leftTimeout = 5 * time.Second

// stillLeft reports whether leftSQL, given args, finds a row, on db under
// a context of its own (ctx is done by then). When it cannot tell, it says
// a row may remain: the action is then recorded as interrupted, as it
// always was.
func (a *Admin) stillLeft(ctx context.Context, db dbtx, leftSQL string, args ...any) bool {
	askCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leftTimeout)
	defer cancel()
	var left bool
	if err := db.QueryRow(askCtx, ident.Render(leftSQL, a.cfg.Schema), args...).Scan(&left); err != nil {
		return true
	}
	return left
}
