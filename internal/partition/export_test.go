package partition

import (
	"context"
	"time"
)

// What the tests of package partition_test read of the unexported.

func (t *Table) ContentsSQL(name string, retention time.Duration) string {
	return t.contentsSQL(name, retention)
}

func (t *Table) SelectUnfinished(name, bucket string) string { return t.selectUnfinished(name, bucket) }

func (t *Table) Contents(ctx context.Context, q rowQuerier, name string, retention time.Duration) (recent bool, unfinished, running int64, err error) {
	c, err := t.contents(ctx, q, name, retention)
	return c.recent, c.unfinished, c.running, err
}

func (t *Table) UnfinishedStatuses() int { return len(t.unfinished) }
