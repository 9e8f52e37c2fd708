package console

import (
	"cmp"
	"net/http"
	"strings"
	"time"

	"github.com/pgbox/pgbox/admin"
)

// trendWindows are the windows the failures page offers for its trend.
var trendWindows = []struct {
	Name string
	Len  time.Duration
}{{"1h", time.Hour}, {"6h", 6 * time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}}

// trendWindowDefault is the trend's window when the request names none.
const trendWindowDefault = "24h"

// trendBuckets is how many bars a trend has.
const trendBuckets = 24

// failureGroupsShown is how many groups, the largest, the page lists.
const failureGroupsShown = 200

// failuresRefresh is how often, in seconds, the failures page reloads
// itself: on-call watches groups grow, or drain after a replay. It reads
// only the failed messages (admin.Failures), as inboxctl failures does.
const failuresRefresh = 15

// failuresView is what the failures page shows.
type failuresView struct {
	// Consumer, if set, keeps that consumer's groups.
	Consumer string
	// Exact reads every dead and failing message (exact=1), not the
	// newest admin.FailuresReadDefault.
	Exact bool
	// Partial is true when there were more dead and failing messages than
	// were read: the counts are lower bounds (admin.FailureGroup.Partial).
	Partial bool
	// Read is how many messages are read when not Exact.
	Read int64
	// Groups are the failure groups, largest first.
	Groups []admin.FailureGroup
	// Trends holds each group's trend in the window, by fingerprint; a
	// group with no failed attempt in it has none.
	Trends map[string]*admin.Trend
	// Window names the trend's window: "24h".
	Window string
	// Windows names every window the page offers.
	Windows []string
}

// failures lists every failure group (dead and failing messages by
// consumer, type and error pattern), largest first, each with its failed
// attempts in the chosen window, as a trend: one call of admin's
// Failures, which reads only the newest failed messages (all of them with
// exact=1).
func (c *Console) failures(w http.ResponseWriter, r *http.Request, t *Target) error {
	v := failuresView{Consumer: strings.TrimSpace(r.FormValue("consumer")), Window: cmp.Or(r.FormValue("window"), trendWindowDefault),
		Trends: map[string]*admin.Trend{}, Exact: r.FormValue("exact") == "1", Read: admin.FailuresReadDefault}
	var window time.Duration
	for _, tw := range trendWindows {
		v.Windows = append(v.Windows, tw.Name)
		if tw.Name == v.Window {
			window = tw.Len
		}
	}
	if window == 0 {
		return httpError(http.StatusBadRequest, "The trend window %q is not one this page offers: pick %s from the list.", v.Window, strings.Join(v.Windows, ", "))
	}
	// One read gives every group and its trend in the window: the failed
	// messages are read and their errors normalised once.
	var err error
	v.Groups, err = t.Admin.Failures(r.Context(), admin.FailuresOptions{Consumer: v.Consumer, Limit: failureGroupsShown,
		Since: window, Buckets: trendBuckets, KeepQuiet: true, Exact: v.Exact})
	if err != nil {
		return err
	}
	for _, fg := range v.Groups {
		if fg.FailuresInWindow > 0 {
			v.Trends[fg.Fingerprint] = fg.Trend
		}
		v.Partial = v.Partial || fg.Partial
	}
	refresh := failuresRefresh
	if v.Exact {
		refresh = 0 // an exact count reads every failed message: once, when asked
	}
	return c.render(w, r, t, http.StatusOK, "failures", view{Title: "Failures", Data: v, Refresh: refresh})
}
