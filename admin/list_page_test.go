package admin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// ListPage pages through a filter's messages newest first, each page
// starting below the last seq of the one before, until a short page.
func TestListPagePagesBySeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.mixed(t) // payments: 25 dead among others
	dead := admin.Filter{Consumer: "payments", Statuses: []pgbox.InboxStatus{pgbox.InboxDead}}

	var (
		seen   = map[string]bool{}
		before int64
		pages  int
	)
	for {
		page, err := b.adm.ListPage(ctx, admin.ListPageOptions{Before: before, Filter: dead, Limit: 10})
		require.NoError(t, err)
		pages++
		for i, m := range page {
			require.Equal(t, pgbox.InboxDead, m.Status)
			require.False(t, seen[m.ID], "%s on two pages", m.ID)
			seen[m.ID] = true
			if i > 0 {
				require.Less(t, m.Seq, page[i-1].Seq, "newest first")
			}
		}
		if len(page) < 10 {
			break
		}
		before = page[len(page)-1].Seq
	}
	require.Len(t, seen, 25)
	require.Equal(t, 3, pages, "10, 10 and 5")

	_, err := b.adm.ListPage(ctx, admin.ListPageOptions{Limit: admin.ListPageLimitMax + 1})
	require.ErrorContains(t, err, "ListPageOptions.Limit")
	_, err = b.adm.ListPage(ctx, admin.ListPageOptions{Filter: admin.Filter{Fingerprint: "nope"}})
	require.ErrorContains(t, err, "not a fingerprint")
}
