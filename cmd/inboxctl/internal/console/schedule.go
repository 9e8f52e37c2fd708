package console

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pgbox/pgbox/admin"
)

// atLayout is what a datetime-local field sends: a time without a zone,
// which the console reads as UTC, as it shows every time.
const atLayout = "2006-01-02T15:04"

// units are the time units the pace fields offer.
var units = map[string]time.Duration{"s": time.Second, "min": time.Minute, "h": time.Hour}

// scheduleFrom reads the confirmation's "when" and "pace" fields: whether
// the replay runs later (at a time) or throttled (at a rate, or spread
// over a duration), run then by the maintenance job, or now, in the
// background (later is false).
//
// A filled field is never ignored: the time ("at"), the rate and the
// duration ("over") are each a choice of their own, so one filled without
// its choice ("when", "pace" left out or empty, as the page posts them) is
// taken as chosen. A filled field that contradicts the choice made (a
// time with when=now, a duration besides pace=rate), or a rate and a
// duration together, is refused, saying so: a replay meant to be
// throttled must never run at once.
func scheduleFrom(r *http.Request) (opts admin.ScheduleReplayOptions, later bool, err error) {
	form := func(name string) string { return strings.TrimSpace(r.PostFormValue(name)) }
	refuse := func(format string, args ...any) (admin.ScheduleReplayOptions, bool, error) {
		return opts, false, httpError(http.StatusBadRequest, format+" Nothing was changed.", args...)
	}
	when, pace := form("when"), form("pace")
	switch {
	case when != "" && when != "now" && when != "at":
		return refuse("when=%q is not a choice the page offers (now or at).", when)
	case when == "now" && form("at") != "":
		return refuse("You chose to replay now but also gave a time (%s): clear the time to replay now, or choose \"at\" to replay then.", form("at"))
	case pace != "" && pace != "rate" && pace != "over":
		return refuse("pace=%q is not a choice the page offers (rate or over).", pace)
	case form("rate") != "" && form("over") != "":
		return refuse("You gave both a rate (%s per %s) and a duration (%s %s): keep one of them and clear the other.",
			form("rate"), form("rate_unit"), form("over"), form("over_unit"))
	case pace == "" && form("rate") != "":
		pace = "rate"
	case pace == "" && form("over") != "":
		pace = "over"
	}
	if when == "at" || (when == "" && form("at") != "") {
		opts.At, err = time.ParseInLocation(atLayout, form("at"), time.UTC)
		if err != nil {
			return refuse("The time %q is not a date and time such as 2026-11-23T03:00 (UTC).", form("at"))
		}
		if opts.At.Before(time.Now().Add(-time.Minute)) {
			return refuse("%s is in the past: leave the time empty to replay now.", stamp(opts.At))
		}
		later = true
	}
	amount := func(name string) (float64, time.Duration, error) {
		n, err := strconv.ParseFloat(form(name), 64)
		unit, ok := units[form(name+"_unit")]
		if err != nil || !(n > 0) || !ok {
			return 0, 0, httpError(http.StatusBadRequest, "%q per %q is not a positive number and a unit (s, min, h). Nothing was changed.",
				form(name), form(name+"_unit"))
		}
		return n, unit, nil
	}
	switch pace {
	case "rate":
		n, unit, err := amount("rate")
		if err != nil {
			return opts, false, err
		}
		opts.Rate, later = n/unit.Seconds(), true
	case "over":
		n, unit, err := amount("over")
		if err != nil {
			return opts, false, err
		}
		opts.Over, later = time.Duration(n*float64(unit)), true
	}
	return opts, later, nil
}

// scheduleReplay hands a replay to the service's maintenance job, to run
// later or throttled as opts says, and sends the browser to the scheduled
// replays, the new one highlighted.
func (c *Console) scheduleReplay(w http.ResponseWriter, r *http.Request, t *Target, opts admin.ScheduleReplayOptions) error {
	sr, err := t.Admin.ScheduleReplay(r.Context(), opts)
	if err != nil {
		return err
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: replay scheduled", "target", t.Name, "user", opts.Actor.Name, "remote", opts.Actor.Host,
		"scheduled_replay", sr.ID, "selected", sr.Selected)
	return seeOther(w, r, link(t.Name, "/scheduled", "highlight", sr.ID))
}

// noLeader reports whether no maintainer leads t's schema, so that a
// replay scheduled for later or throttled would wait, silently, until one
// starts: the confirmation says so before the operator chooses. A failed
// read of the processes reports a leader: a warning is no reason to fail
// the page.
func noLeader(ctx context.Context, t *Target) bool {
	ps, err := t.Admin.Processes(ctx)
	return err == nil && ps.Leader == nil
}
