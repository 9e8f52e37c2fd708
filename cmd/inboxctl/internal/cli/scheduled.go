package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox/admin"
)

// parseAt reads --at: an RFC 3339 time, or a duration from now.
func parseAt(s string, now time.Time) (time.Time, error) {
	if d, err := parseDuration(s); err == nil {
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usagef("--at %q is neither a time (2026-11-23T03:00:00Z) nor a duration from now (90m, 2h, 1d)", s)
	}
	if t.Before(now.Add(-time.Minute)) {
		return time.Time{}, usagef("--at %s is in the past: leave --at out to replay now", t.UTC().Format(time.RFC3339))
	}
	return t, nil
}

// scheduleReplay records a replay for later: replay --at.
func (a *app) scheduleReplay(ctx context.Context, flags changeFlags, ids []string, note, at string) error {
	runAt, err := parseAt(at, a.now())
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
	filter.ReplayableOnly = true
	n, err := a.admin.Count(ctx, filter)
	if err != nil {
		return err
	}
	when := stamp(runAt) + " UTC"
	now := fmt.Sprintf("%s %s replayable now", plural(n, "message"), map[bool]string{true: "is", false: "are"}[n == 1])
	if flags.dryRun {
		return a.printReport(flags.output, changeReport{Action: "schedule replay", DryRun: true, Matched: n, Selection: filter},
			fmt.Sprintf("Would schedule a replay for %s (%s). Nothing was changed (--dry-run).", when, now))
	}
	if bulk && !flags.yes {
		if err := a.confirm(ctx, fmt.Sprintf("Schedule a replay for %s (%s)?", when, now), "scheduled"); err != nil {
			return err
		}
	}
	r, err := a.admin.ScheduleReplay(ctx, admin.ScheduleReplayOptions{At: runAt, Filter: filter, Note: note})
	if err != nil {
		return err
	}
	switch flags.output {
	case formatJSON:
		return writeJSON(a.out, r)
	case formatJSONL:
		return writeJSONLine(a.out, r)
	}
	fmt.Fprintf(a.out, "Scheduled replay %d for %s (%s). The maintenance job replays what is replayable then.\n", r.ID, when, now)
	fmt.Fprintf(a.out, "See it: inboxctl scheduled. Call it off: inboxctl scheduled cancel %d\n", r.ID)
	return nil
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
			if output != formatTable {
				return writeList(a.out, output, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(a.out, "No scheduled replays. Schedule one with: inboxctl replay … --at TIME")
				return nil
			}
			t := newTable(a.out)
			fmt.Fprintln(t, "ID\tRUN AT (UTC)\tSTATE\tREPLAYED\tSELECTION\tNOTE")
			for _, r := range list {
				state := string(r.State)
				if r.State == admin.ReplayFailed {
					state += ": " + oneLine(r.Error, 60)
				}
				fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, stamp(r.RunAt), state, count(r.Replayed), describe(r.Filter), oneLine(r.Note, 40))
			}
			return t.Flush()
		},
	}
	outputFlag(cmd, &output, listOutput)
	cmd.Flags().IntVar(&limit, "limit", 50, "show at most this many")
	cmd.AddCommand(&cobra.Command{
		Use:     "cancel ID",
		Short:   "Call off a scheduled replay that has not started",
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
			if err := a.admin.CancelScheduledReplay(cmd.Context(), id); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "Cancelled scheduled replay %d.\n", id)
			return nil
		},
	})
	return cmd
}

// describe sums up a filter in one cell: "consumer=payments status=dead".
func describe(f admin.Filter) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("consumer", f.Consumer)
	add("status", joinStatuses(f.Statuses))
	add("type", f.EventType)
	add("group", f.Fingerprint)
	if f.ErrorContains != "" {
		add("error-contains", strconv.Quote(f.ErrorContains))
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
		add("ids", oneLine(strings.Join(f.IDs, ","), 40))
	}
	if len(parts) == 0 {
		return "all replayable"
	}
	return strings.Join(parts, " ")
}
