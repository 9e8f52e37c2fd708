package cli

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox/admin"
)

// parseAt reads --at: a time (parseTime), or a duration from now.
func parseAt(s string, now time.Time) (time.Time, error) {
	if d, err := parseDuration(s); err == nil {
		return now.Add(d), nil
	}
	t, ok, err := parseTime("--at", s)
	switch {
	case err != nil:
		return time.Time{}, err
	case !ok:
		return time.Time{}, usagef("--at %q is neither a time (%s) nor a duration from now (90m, 2h, 1d)", s, timeForms)
	}
	if t.Before(now.Add(-time.Minute)) {
		return time.Time{}, usagef("--at %s is in the past: leave --at out to replay now", t.UTC().Format(time.RFC3339))
	}
	return t, nil
}

// replayLater is how replay schedules instead of replaying at once:
// --at, --rate, --over.
type replayLater struct {
	at, over, rate string
}

func (l *replayLater) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&l.at, "at", "", "replay later, at this time (2026-11-23T03:00:00Z, 2026-11-23 03:00 UTC) or after this long (90m, 2h, 1d)")
	cmd.Flags().StringVar(&l.rate, "rate", "", "replay at most this fast: 10/s, 300/m, 1000/h (a scheduled replay the maintenance job paces)")
	cmd.Flags().StringVar(&l.over, "over", "", "spread the replay evenly over this long: 30m, 2h (instead of --rate)")
}

// set reports whether any of the flags was given.
func (l replayLater) set() bool { return l.at != "" || l.rate != "" || l.over != "" }

// parseRate reads --rate: messages per second, minute or hour ("10/s",
// "300/m", "1000/h"), or a bare number per second.
func parseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(s, "/")
	per := map[string]float64{"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[unit]
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || per == 0 || !(n > 0) || math.IsInf(n, 0) {
		return 0, usagef("--rate %q is not a rate such as 10/s, 300/m or 1000/h", s)
	}
	return n / per, nil
}

// formatRate shows a rate the way --rate takes it: "10/s", "30/m".
func formatRate(perSecond float64) string {
	switch {
	case perSecond == 0:
		return "-"
	case perSecond >= 1:
		return strconv.FormatFloat(math.Round(perSecond*100)/100, 'f', -1, 64) + "/s"
	case perSecond*60 >= 1:
		return strconv.FormatFloat(math.Round(perSecond*6000)/100, 'f', -1, 64) + "/m"
	default:
		return strconv.FormatFloat(math.Round(perSecond*360000)/100, 'f', -1, 64) + "/h"
	}
}

// options reads the flags into what ScheduleReplay takes (less the
// filter and note).
func (l replayLater) options(now time.Time) (admin.ScheduleReplayOptions, error) {
	var (
		opts admin.ScheduleReplayOptions
		err  error
	)
	if l.rate != "" && l.over != "" {
		return opts, usagef("give --rate or --over, not both")
	}
	if l.at != "" {
		if opts.At, err = parseAt(l.at, now); err != nil {
			return opts, err
		}
	}
	if l.rate != "" {
		if opts.Rate, err = parseRate(l.rate); err != nil {
			return opts, err
		}
	}
	if l.over != "" {
		if opts.Over, err = parseDuration(l.over); err != nil || opts.Over <= 0 {
			return opts, usagef("--over %q is not a duration such as 30m, 2h or 1d", l.over)
		}
	}
	return opts, nil
}

// scheduleReplay records a replay for later, or a throttled one: replay
// --at, --rate, --over.
func (a *app) scheduleReplay(ctx context.Context, flags changeFlags, ids []string, note string, later replayLater) error {
	opts, err := later.options(a.now())
	if err != nil {
		return err
	}
	filter, bulk, err := a.selection(flags, ids)
	if err != nil {
		return err
	}
	if err := a.open(ctx); err != nil {
		return err
	}
	if !bulk {
		// Only that they exist: which are replayable is judged when it runs.
		statuses, err := a.admin.IDStatuses(ctx, filter.Consumer, ids)
		if err != nil {
			return err
		}
		var missing []string
		for _, id := range ids {
			if _, ok := statuses[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("consumer %q holds no message %s: %w; nothing was scheduled", filter.Consumer, strings.Join(missing, ", "), admin.ErrNotFound)
		}
	}
	filter = filter.ReplaySelection()
	n, err := a.admin.Count(ctx, filter)
	if err != nil {
		return err
	}
	if n == 0 {
		// A misspelt consumer, a group that is another consumer's, or no
		// group at all would never match: scheduling it would replay
		// nothing, silently.
		if err := a.unknownConsumer(ctx, filter.Consumer); err != nil {
			return err
		}
		if err := a.checkGroup(ctx, filter, "replay", "scheduled"); err != nil {
			return err
		}
	}
	a.warnNoMaintainer(ctx)
	when := "now"
	if !opts.At.IsZero() {
		when = stamp(opts.At) + " UTC"
	}
	what := fmt.Sprintf("%s %s replayable now", plural(n, "message"), map[bool]string{true: "is", false: "are"}[n == 1])
	if pace := describePace(opts, n); pace != "" {
		what += ", " + pace
	}
	if flags.dryRun {
		report := scheduleReport{
			changeReport:  changeReport{Action: "schedule replay", DryRun: true, Matched: n, Selection: filter},
			OverSeconds:   opts.Over.Seconds(),
			RatePerSecond: pace(opts, n),
		}
		if !opts.At.IsZero() {
			at := opts.At.UTC()
			report.At = &at
		}
		if flags.output == formatJSON {
			if report.Consumers, err = a.admin.CountByConsumer(ctx, filter); err != nil {
				return err
			}
		}
		return a.showDryRun(ctx, flags.output, fmt.Sprintf("Would schedule a replay for %s (%s). Nothing was changed (--dry-run).", when, what),
			report, filter, n)
	}
	if bulk && !flags.yes {
		if err := a.confirm(ctx, fmt.Sprintf("Schedule a replay of %s in schema %s for %s (%s)?", describe(filter), a.admin.Schema(), when, what), "scheduled"); err != nil {
			return err
		}
	}
	opts.Actor, opts.Filter, opts.Note = a.actor(), filter, note
	r, err := a.admin.ScheduleReplay(ctx, opts)
	if err != nil {
		return err
	}
	switch flags.output {
	case formatJSON:
		return writeJSON(a.out, r)
	case formatJSONL:
		return writeJSONLine(a.out, r)
	}
	fmt.Fprintf(a.out, "Scheduled replay %d for %s (%s). The maintenance job replays what is replayable then.\n", r.ID, when, what)
	fmt.Fprintf(a.out, "See it: %s. Call it off: %s\n", a.hint("scheduled"), a.hint("scheduled", "cancel", strconv.FormatInt(r.ID, 10)))
	return nil
}

// warnNoMaintainer warns, on stderr, when no maintainer is alive to run
// scheduled and throttled replays: one accepted then waits, silently,
// until a maintenance.Maintainer starts. It says nothing when the
// processes cannot be read: a warning is no reason to stop.
func (a *app) warnNoMaintainer(ctx context.Context) {
	ps, err := a.admin.Processes(ctx)
	if err != nil || ps.Leader != nil {
		return
	}
	fmt.Fprintf(a.errOut, "inboxctl: warning: no maintainer is alive, so no scheduled or throttled replay runs until one starts "+
		"(a maintenance.Maintainer in a service; '%s' shows the leader)\n", a.hint("processes"))
}

// scheduleReport is what replay --at, --rate or --over prints for
// --dry-run with -o json: the dry run's report, with when the replay would
// start, its pace, and whose messages it would replay.
type scheduleReport struct {
	changeReport
	// At is when the replay would start (--at); null for now.
	At *time.Time `json:"at"`
	// Consumers counts the messages it would replay now, per consumer: a
	// failure group or a status names none.
	Consumers map[string]int64 `json:"consumers"`
	// OverSeconds is --over, in seconds; left out without it.
	OverSeconds float64 `json:"over_seconds,omitzero"`
	// RatePerSecond is its pace, messages a second: --rate, or the
	// selection spread over --over; 0 for a replay not throttled.
	RatePerSecond float64 `json:"rate_per_second"`
}

// pace is how many messages a second a replay of n messages goes at:
// opts.Rate, or n spread over opts.Over; 0 when it is not throttled.
func pace(opts admin.ScheduleReplayOptions, n int64) float64 {
	if opts.Over > 0 {
		return float64(max(n, 1)) / opts.Over.Seconds()
	}
	return opts.Rate
}

// describePace says how fast a replay of n messages goes: "at 10/s, about
// 2m0s"; "" when it is not throttled.
func describePace(opts admin.ScheduleReplayOptions, n int64) string {
	rate := pace(opts, n)
	if rate == 0 {
		return ""
	}
	return fmt.Sprintf("at %s, about %s", formatRate(rate), age(time.Duration(float64(n)/rate*float64(time.Second))))
}

func (a *app) scheduledCommand() *cobra.Command {
	var (
		limit  int
		output string
	)
	cmd := &cobra.Command{
		Use:   "scheduled",
		Short: "List replays scheduled for later (replay --at)",
		Long: `scheduled lists the replays scheduled with 'inboxctl replay --at': those waiting
for their time or under way first, soonest first, then finished ones, newest
first. The maintenance job (package maintenance, running in the service) runs
each once its time has come, by the database clock.`,
		Example: `  inboxctl scheduled
  inboxctl scheduled -o json
  inboxctl scheduled cancel 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			list, err := a.admin.ScheduledReplays(ctx, limit)
			if err != nil {
				return err
			}
			if slices.ContainsFunc(list, func(r admin.ScheduledReplay) bool {
				return r.State == admin.ReplayScheduled || r.State == admin.ReplayRunning
			}) {
				a.warnNoMaintainer(ctx)
			}
			if output != formatTable {
				return writeList(a.out, output, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(a.out, "No scheduled replays. Schedule one with: inboxctl replay … --at TIME")
				return nil
			}
			t := newTable(a.out)
			fmt.Fprintln(t, "ID\tRUN AT (UTC)\tSTATE\tRATE\tREPLAYED\tSELECTION\tNOTE")
			for _, r := range list {
				state := clean(string(r.State))
				if r.State == admin.ReplayFailed {
					state += ": " + cell(r.Error, 60)
				}
				fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, stamp(r.RunAt), state, formatRate(r.Rate), replayProgress(r),
					describe(r.Filter), cell(r.Note, 40))
			}
			return t.Flush()
		},
	}
	outputFlag(cmd, &output, listOutput)
	limitFlag(cmd, &limit, 50, "show at most this many")
	var note string
	cancel := &cobra.Command{
		Use:     "cancel ID",
		Short:   "Call off a scheduled replay waiting or under way (a throttled one, say)",
		Example: `  inboxctl scheduled cancel 3`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return usagef("%q is not a scheduled replay's id: 'inboxctl scheduled' lists them", args[0])
			}
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			err = a.admin.CancelScheduledReplay(cmd.Context(), admin.CancelScheduledReplayOptions{Actor: a.actor(), ID: id, Note: note})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "Cancelled scheduled replay %d.\n", id)
			return nil
		},
	}
	cancel.Flags().StringVar(&note, "note", "", "why, for the audit log")
	cmd.AddCommand(cancel)
	return cmd
}

// replayProgress shows how far a scheduled replay got: "120 of 1,200" (of the
// messages replayable when it was scheduled).
func replayProgress(r admin.ScheduledReplay) string {
	if r.Selected == 0 && r.Replayed == 0 {
		return "0"
	}
	return count(r.Replayed) + " of " + count(r.Selected)
}

// describe sums up a filter in one cell: "consumer=payments status=dead".
func describe(f admin.Filter) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+clean(v))
		}
	}
	add("consumer", f.Consumer)
	add("status", joinStatuses(f.Statuses))
	add("type", f.EventType)
	add("group", f.Fingerprint)
	if f.ErrorContains != "" {
		add("error-contains", strconv.Quote(f.ErrorContains))
	}
	if f.OrderingKey != "" {
		add("ordering-key", strconv.Quote(f.OrderingKey))
	}
	if f.ErrorMatches != "" {
		add("error-matches", strconv.Quote(f.ErrorMatches))
	}
	if !f.Since.IsZero() {
		add("since", f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		add("until", f.Until.UTC().Format(time.RFC3339))
	}
	if len(f.IDs) > 0 {
		parts = append(parts, "ids="+cell(strings.Join(f.IDs, ","), 40))
	}
	if len(parts) == 0 {
		return "all replayable"
	}
	return strings.Join(parts, " ")
}
