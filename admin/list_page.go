package admin

import (
	"context"
	"fmt"
)

// ListPageLimitMax is the most messages one ListPage returns.
const ListPageLimitMax = 500

// ListPageOptions says which page of messages ListPage returns.
type ListPageOptions struct {
	// Before keeps the messages that arrived before the message with this
	// seq: pass the Seq of the last message of one page to get the next.
	// Defaults to 0: the newest messages.
	Before int64

	// Filter selects the messages. Defaults to the zero Filter: every
	// message.
	Filter Filter

	// Limit is the most messages returned, newest first, at most
	// ListPageLimitMax. Defaults to 50.
	Limit int
}

// ListPage returns one page of the messages opts.Filter selects, newest
// first: a screen's worth, where List streams every match. Pages are cut
// by arrival order (seq), never by an offset, so the hundredth page costs
// what the first does, and messages received meanwhile do not shift the
// pages an operator is reading. It reads as List does, through the same
// indexes (a failure group's through inbox_failure_group_idx).
func (a *Admin) ListPage(ctx context.Context, opts ListPageOptions) ([]Message, error) {
	switch {
	case opts.Limit < 0 || opts.Limit > ListPageLimitMax:
		return nil, fmt.Errorf("admin: ListPageOptions.Limit is %d: use 1 to %d, or 0 for 50", opts.Limit, ListPageLimitMax)
	case opts.Before < 0:
		return nil, fmt.Errorf("admin: ListPageOptions.Before is %d: use a message's Seq, or 0 for the newest", opts.Before)
	}
	if err := opts.Filter.Validate(); err != nil {
		return nil, err
	}
	limit := opts.Limit
	if limit == 0 {
		limit = 50
	}
	var below any
	if opts.Before > 0 {
		below = opts.Before
	}
	out := make([]Message, 0, limit)
	_, _, err := a.listPage(ctx, opts.Filter, below, limit, func(m Message) error {
		out = append(out, m)
		return nil
	})
	return out, err
}
