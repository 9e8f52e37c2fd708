package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// change describes one of the commands that change messages in bulk:
// replay and discard.
type change struct {
	// verb and past name the change in prompts and reports.
	verb, past string
	// eligible lists the statuses an id may have to be changed.
	eligible []pgbox.InboxStatus
	// why explains to the operator why other statuses are refused.
	why string
	// resume says why running the command again after an interruption
	// finishes the change safely.
	resume string
	// filter narrows a filter to what the change may touch.
	filter func(admin.Filter) admin.Filter
	// run makes the change, batchSize rows per statement, reporting
	// progress after each batch.
	run func(ctx context.Context, f admin.Filter, batchSize int, progress func(done int64)) (int64, error)
}

// changeFlags are the flags replay and discard share.
type changeFlags struct {
	all       bool
	batchSize int
	dryRun    bool
	f         filterFlags
	output    string
	yes       bool
}

func (c *changeFlags) add(cmd *cobra.Command, withStatus bool) {
	c.f.add(cmd, withStatus)
	cmd.Flags().BoolVar(&c.all, "all", false, "select every eligible message (when no other filter is given)")
	cmd.Flags().IntVar(&c.batchSize, "batch-size", admin.BatchSizeDefault, "rows changed per statement")
	cmd.Flags().BoolVar(&c.dryRun, "dry-run", false, "show what would change, and change nothing")
	cmd.Flags().BoolVarP(&c.yes, "yes", "y", false, "do not ask for confirmation")
	outputFlag(cmd, &c.output, changeOutput)
}

// replayable are the statuses replay takes, and replayableWhy says why
// only those.
var (
	replayable    = []pgbox.InboxStatus{pgbox.InboxDead, pgbox.InboxDiscarded, pgbox.InboxPending}
	replayableWhy = "only dead, discarded or failing messages are replayed: a running one is held by a worker, a done one has had its effect"
)

// selection is the filter that ids, or the flags, select, and whether it
// is a bulk (filter) selection. A --status replay never takes (replay's
// is the only --status of a change) is a usage error, not a selection of
// nothing.
func (a *app) selection(flags changeFlags, ids []string) (admin.Filter, bool, error) {
	filter, err := flags.f.filter(a.now())
	if err != nil {
		return filter, false, err
	}
	for _, s := range filter.Statuses {
		if _, err := pgbox.ParseInboxStatus(string(s)); err == nil && !slices.Contains(replayable, s) {
			return filter, false, usagef("--status %s: %s", s, replayableWhy)
		}
	}
	if flags.batchSize < 1 {
		return filter, false, usagef("--batch-size %d: use 1 or more", flags.batchSize)
	}
	bulk := len(ids) == 0
	if bulk && !flags.f.any() && !flags.all {
		return filter, false, usagef("name message ids, or select messages with filters (--consumer, --status, --type, --error-contains, --group …), or pass --all")
	}
	if !bulk {
		if flags.f.consumer == "" {
			return filter, false, usagef("message ids need --consumer: ids are unique per consumer")
		}
		if flags.f.narrows() {
			return filter, false, usagef("give either message ids (with --consumer) or filters, not both")
		}
		filter = admin.Filter{Consumer: flags.f.consumer, IDs: ids}
	}
	return filter, bulk, nil
}

// apply runs ch on the messages named by ids, or selected by the flags.
func (a *app) apply(ctx context.Context, ch change, flags changeFlags, ids []string) error {
	filter, bulk, err := a.selection(flags, ids)
	if err != nil {
		return err
	}
	if err := a.open(ctx); err != nil {
		return err
	}
	if !bulk {
		if err := a.checkIDs(ctx, ch, filter.Consumer, ids); err != nil {
			return err
		}
	}
	selected := filter
	filter = ch.filter(filter)

	n, err := a.admin.Count(ctx, filter)
	if err != nil {
		return err
	}
	report := changeReport{Action: ch.verb, DryRun: flags.dryRun, Matched: n, Selection: filter}
	switch {
	case n == 0:
		if err := a.unknownConsumer(ctx, filter.Consumer); err != nil {
			return err
		}
		if err := a.checkGroup(ctx, filter, ch.verb, ch.past); err != nil {
			return err
		}
		headline := fmt.Sprintf("Nothing to %s: no eligible message matches.", ch.verb)
		if ch.verb == "replay" && flags.output == formatTable { // JSON has no headline
			left, err := a.discardedLeftOut(ctx, selected)
			if err != nil {
				return err
			}
			headline += left
		}
		return a.printReport(flags.output, report, headline)
	case flags.dryRun:
		return a.showDryRun(ctx, flags.output, fmt.Sprintf("Would %s %s. Nothing was changed (--dry-run).", ch.verb, plural(n, "message")),
			report, filter, n)
	case bulk && !flags.yes:
		if err := a.confirm(ctx, fmt.Sprintf("%s %s (%s) in schema %s?", capitalize(ch.verb), plural(n, "message"), describe(filter), a.admin.Schema()), ch.past); err != nil {
			return err
		}
	}
	b := a.startBatches(ctx, capitalize(ch.past), n)
	report.Changed, err = ch.run(b.ctx, filter, flags.batchSize, b.report)
	a.endBatches(b)
	if b.interrupted() && err != nil {
		return a.interruptedChange(flags.output, report, ch.past, "message", ch.resume)
	}
	if err != nil {
		return fmt.Errorf("%w (%s %s before the error)", err, ch.past, plural(report.Changed, "message"))
	}
	a.finishedDespite(b, ch.past)
	return a.printReport(flags.output, report, fmt.Sprintf("%s %s.", capitalize(ch.past), plural(report.Changed, "message")))
}

// discardedLeftOut says, for a replay of f that found nothing, how many
// discarded messages f selects, which a replay leaves alone unless named
// (admin.Filter.ReplaySelection), and how to name them; "" when f names
// statuses or ids, or selects no discarded message. Without it, a group
// whose messages were all discarded would read as empty.
func (a *app) discardedLeftOut(ctx context.Context, f admin.Filter) (string, error) {
	if len(f.Statuses) > 0 || len(f.IDs) > 0 {
		return "", nil
	}
	f.Statuses = []pgbox.InboxStatus{pgbox.InboxDiscarded}
	n, err := a.admin.Count(ctx, f.ReplaySelection())
	if err != nil || n == 0 {
		return "", err
	}
	return fmt.Sprintf(" %s %s discarded, which a replay leaves alone unless named: add --status discarded to replay %s.",
		plural(n, "selected message"), verb(n, "is", "are"), verb(n, "it", "them")), nil
}

// dryRunShown is how many messages a dry run's table shows.
const dryRunShown = 20

// showDryRun shows what a replay (now or scheduled) or a discard would
// change, the matched messages f selects: report in JSON, every selected
// message in JSON lines, or the headline and the newest of them in a
// table.
func (a *app) showDryRun(ctx context.Context, output, headline string, report any, f admin.Filter, matched int64) error {
	switch output {
	case formatJSON:
		return writeJSON(a.out, report)
	case formatJSONL:
		return a.list(ctx, f, 0, formatJSONL, "")
	}
	if matched == 0 {
		_, err := fmt.Fprintln(a.out, headline)
		return err
	}
	fmt.Fprintf(a.out, "%s The newest of them:\n\n", headline)
	return a.list(ctx, f, dryRunShown, formatTable, fmt.Sprintf("add -o jsonl to list all %s as JSON lines.", count(matched)))
}

// checkIDs refuses the whole change when an id does not exist or is not in
// a state the change applies to, so that a typo changes nothing.
func (a *app) checkIDs(ctx context.Context, ch change, consumer string, ids []string) error {
	statuses, err := a.admin.IDStatuses(ctx, consumer, ids)
	if err != nil {
		return err
	}
	var missing, refused []string
	for _, id := range ids {
		status, ok := statuses[id]
		switch {
		case !ok:
			missing = append(missing, id)
		case !slices.Contains(ch.eligible, status):
			refused = append(refused, fmt.Sprintf("%s is %s", id, status))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("consumer %q holds no message %s: %w; nothing was %s", consumer, strings.Join(missing, ", "), admin.ErrNotFound, ch.past)
	}
	if len(refused) > 0 {
		return fmt.Errorf("cannot %s: %s (%s); nothing was %s", ch.verb, strings.Join(refused, ", "), ch.why, ch.past)
	}
	return nil
}

func capitalize(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

func (a *app) replayCommand() *cobra.Command {
	var (
		flags       changeFlags
		later       replayLater
		note        string
		payloadFile string
	)
	cmd := &cobra.Command{
		Use:   "replay [ID...]",
		Short: "Put dead or failing messages back to pending, with their attempts zeroed",
		Long: `replay puts messages back to pending, due now, with their attempts zeroed, so the
dispatcher runs them again. It applies to dead, discarded and failing (retrying
after a failure) messages; never to running ones (a worker holds them) nor done
ones (their effect has happened: running them again is what the inbox exists to
prevent). Each message's history is kept, the replay is added to it, and its
replay counter goes up.

Select messages by id (with --consumer) or by filter. A filter replays
discarded messages only when --status names discarded: they were set aside on
purpose, and a replay of their group (as failures hints) leaves them. A filter
replay asks for confirmation (or --yes) and runs in batches of --batch-size,
each its own short statement, so a million-message replay never holds one
giant lock.

--at schedules the replay for later instead (after a fix is deployed, when a
partner's outage window ends): a time, or a duration from now. Nothing changes
until then; the maintenance job (package maintenance, running in the
service) then replays the selected messages that are still replayable, in
batches, exactly once. 'inboxctl scheduled' lists scheduled replays.

--rate (10/s, 300/m) or --over (30m: the selection spread evenly) throttle the
replay, so a recovered downstream service is not hit by the whole backlog at
once: it is scheduled (now, or --at) and the maintenance job replays at most
what the rate allows at each of its runs, resuming after a crash without
repeating a message or exceeding the rate.

--payload-file F replaces the payload of the one message named by id (dead,
discarded or failing) with F's bytes and replays it. The original payload is
kept, and the edit is in the message's history and the audit log. The inbox
still recognises a redelivery of the original as a duplicate.

Every replay is recorded in the audit log ('inboxctl audit'), as the OS user
or --as NAME; a --dry-run is not.`,
		Example: `  inboxctl replay order-17/placed --consumer payments
  inboxctl replay --group 3f2a9c1d0b7e --note "gateway fixed"
  inboxctl replay --consumer payments --status dead --error-contains timeout --dry-run
  inboxctl replay --consumer payments --status dead --yes
  inboxctl replay --group 3f2a9c1d0b7e --at 2099-01-01T03:00:00Z --note "after the gateway's maintenance"
  inboxctl replay --consumer payments --status dead --at 2h --yes
  inboxctl replay --group 3f2a9c1d0b7e --rate 10/s --yes
  inboxctl replay --consumer payments --status dead --over 30m --yes
  inboxctl replay order-17/placed --consumer payments --payload-file fixed.json --note "currency code fixed"`,
		RunE: func(cmd *cobra.Command, ids []string) error {
			if payloadFile != "" {
				return a.editAndReplay(cmd.Context(), flags, ids, note, payloadFile, later)
			}
			if later.set() {
				return a.scheduleReplay(cmd.Context(), flags, ids, note, later)
			}
			return a.apply(cmd.Context(), change{
				verb: "replay", past: "replayed",
				eligible: replayable,
				why:      replayableWhy,
				resume: "it replays the rest; a message already replayed is pending, and replaying it again only makes it due now " +
					"and counts one more replay: none runs again once it has succeeded",
				filter: admin.Filter.ReplaySelection,
				run: func(ctx context.Context, f admin.Filter, batchSize int, progress func(int64)) (int64, error) {
					return a.admin.Replay(ctx, admin.ReplayOptions{Actor: a.actor(), BatchSize: batchSize, Filter: f, Note: note, ProgressFunc: progress})
				},
			}, flags, ids)
		},
	}
	flags.add(cmd, true)
	cmd.Flags().StringVar(&note, "note", "", "a note kept in each replayed message's history")
	later.add(cmd)
	cmd.Flags().StringVar(&payloadFile, "payload-file", "", "replace the one named message's payload with this file's bytes (the original is kept), then replay it")
	return cmd
}

func (a *app) discardCommand() *cobra.Command {
	var (
		flags  changeFlags
		reason string
	)
	cmd := &cobra.Command{
		Use:   "discard [ID...] --reason TEXT",
		Short: "Set dead messages aside for good, with a reason",
		Long: `discard marks dead messages as discarded: kept for the record (until purged), never
run, and no longer holding up their ordering key. The reason is kept in each
message's history. Only dead messages can be discarded.`,
		Example: `  inboxctl discard order-99/placed --consumer payments --reason "test order, not real"
  inboxctl discard --group 3f2a9c1d0b7e --reason "refunded by hand, ticket OPS-412" --yes`,
		RunE: func(cmd *cobra.Command, ids []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef("--reason is required: say why, for whoever looks at these messages next")
			}
			return a.apply(cmd.Context(), change{
				verb: "discard", past: "discarded",
				eligible: []pgbox.InboxStatus{pgbox.InboxDead},
				why:      "only dead messages are discarded",
				resume:   "messages already discarded are no longer dead, so it discards only the rest",
				filter: func(f admin.Filter) admin.Filter {
					f.Statuses = []pgbox.InboxStatus{pgbox.InboxDead}
					return f
				},
				run: func(ctx context.Context, f admin.Filter, batchSize int, progress func(int64)) (int64, error) {
					return a.admin.Discard(ctx, admin.DiscardOptions{Actor: a.actor(), BatchSize: batchSize, Filter: f, ProgressFunc: progress, Reason: reason})
				},
			}, flags, ids)
		},
	}
	flags.add(cmd, false)
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; kept in each message's history)")
	return cmd
}

func (a *app) purgeCommand() *cobra.Command {
	var (
		olderThan, status, consumer string
		batchSize                   int
		dryRun, yes                 bool
		output                      string
	)
	cmd := &cobra.Command{
		Use:   "purge --older-than DURATION",
		Short: "Delete done (or discarded) messages older than a duration",
		Long: `purge deletes done messages processed more than --older-than ago (or, with
--status discarded, discarded ones received that long ago), in batches.

A done message is the inbox's memory that it was handled: once deleted, a
redelivery of it is handled again. Keep --older-than longer than any
producer's or broker's redelivery window. Dead messages are never purged:
replay or discard them first.

` + purgeWindowRule + `

An interrupted purge stops after the batch under way and says how many it
deleted; running the same command again deletes the rest.`,
		Example: `  inboxctl purge --older-than 30d --dry-run
  inboxctl purge --older-than 30d --yes
  inboxctl purge --status discarded --older-than 7d --consumer payments`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if olderThan == "" {
				return usagef("--older-than is required, such as 30d: done messages are the inbox's dedupe memory")
			}
			d, err := parseDuration(olderThan)
			if err != nil {
				return usagef("--older-than %q is not a duration such as 90m, 36h or 30d", olderThan)
			}
			if batchSize < 1 {
				return usagef("--batch-size %d: use 1 or more", batchSize)
			}
			if s := pgbox.InboxStatus(status); s != pgbox.InboxDone && s != pgbox.InboxDiscarded {
				return usagef("--status %q: only done or discarded messages can be purged", status)
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			opts := admin.PurgeOptions{Actor: a.actor(), BatchSize: batchSize, Consumer: consumer, OlderThan: d, Status: pgbox.InboxStatus(status)}
			n, err := a.admin.CountPurgeable(ctx, opts)
			if err != nil {
				return err
			}
			what := fmt.Sprintf("%s older than %s", plural(n, status+" message"), olderThan)
			if consumer != "" {
				what += fmt.Sprintf(" of consumer %q", consumer)
			}
			report := changeReport{Action: "purge", DryRun: dryRun, Matched: n, Selection: purgeSelection{
				Consumer: consumer, OlderThan: d.Seconds(), Status: pgbox.InboxStatus(status)}}
			if n == 0 {
				if err := a.unknownConsumer(ctx, consumer); err != nil {
					return err
				}
				return a.printReport(output, report, fmt.Sprintf("Nothing to purge: no %s message older than %s.", status, olderThan))
			}
			a.warnPurgeWindow(d, olderThan, pgbox.InboxStatus(status))
			if dryRun {
				return a.printReport(output, report, fmt.Sprintf("Would delete %s. Nothing was changed (--dry-run).", what))
			}
			if !yes {
				if err := a.confirm(ctx, fmt.Sprintf("Delete %s in schema %s?", what, a.admin.Schema()), "deleted"); err != nil {
					return err
				}
			}
			b := a.startBatches(ctx, "Deleted", n)
			opts.ProgressFunc = b.report
			report.Changed, err = a.admin.Purge(b.ctx, opts)
			a.endBatches(b)
			if b.interrupted() && err != nil {
				return a.interruptedChange(output, report, "deleted", status+" message", "the messages already deleted are gone, so it deletes only the rest")
			}
			if err != nil {
				return fmt.Errorf("%w (deleted %s before the error)", err, count(report.Changed))
			}
			a.finishedDespite(b, "deleted")
			return a.printReport(output, report, fmt.Sprintf("Deleted %s.", plural(report.Changed, status+" message")))
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "delete messages older than this: 90m, 36h, 30d (required)")
	cmd.Flags().StringVar(&status, "status", string(pgbox.InboxDone), "done or discarded")
	cmd.Flags().StringVar(&consumer, "consumer", "", "only this consumer's messages")
	cmd.Flags().IntVar(&batchSize, "batch-size", admin.BatchSizeDefault, "rows deleted per statement")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted, and delete nothing")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	outputFlag(cmd, &output, documentOutput)
	return cmd
}
