package admin

import (
	"context"
	"time"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

// An interrupted replay or discard (its context done between two
// batches) may have had nothing left to do: the interruption came during
// its last batch. It is then complete, and is recorded as finished, not as
// interrupted with work left. A walk by seq is over when a batch touched
// fewer rows than a batch holds (the walk's scan found no more); after a
// full batch, the walk asks leftSQL whether a row remains beyond it.

// replayLeftSQL reports whether a replayable message matching the filter
// remains above seq $12: what replayBatchSQL's next batch would replay.
const replayLeftSQL = `
SELECT EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE ` + filterSQL + ` AND ` + replayableSQL + ` AND i.seq > $12)`

// discardLeftSQL reports whether a dead message matching the filter
// remains above seq $12: what discardBatchSQL's next batch would discard.
const discardLeftSQL = `
SELECT EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE ` + filterSQL + ` AND i.status = ` + tables.InboxDead + ` AND i.seq > $12)`

// leftTimeout bounds leftAfter's question, asked after an interruption.
const leftTimeout = 5 * time.Second

// leftAfter reports whether leftSQL finds a row matching f above seq
// after, on db, under a context of its own (ctx is done by then). When it
// cannot tell, it says a row may remain: the action is then recorded as
// interrupted, as it always was.
func (a *Admin) leftAfter(ctx context.Context, db dbtx, leftSQL string, f Filter, after int64) bool {
	askCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leftTimeout)
	defer cancel()
	var left bool
	if err := db.QueryRow(askCtx, ident.Render(leftSQL, a.cfg.Schema), append(f.args(), after)...).Scan(&left); err != nil {
		return true
	}
	return left
}
