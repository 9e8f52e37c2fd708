package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

func (a *app) statsCommand() *cobra.Command {
	var (
		output               string
		check, exact, watch  bool
		interval, stallAfter time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count messages per consumer and status, and the outbox backlog",
		Long: `stats counts each consumer's inbox messages by status, with the age of its oldest
pending message and how many it finished in the last minute and hour, and the
outbox's backlog with the age of its oldest unpublished message.

Pending messages are split four ways: FRESH (never failed, waiting for a
worker), RETRYING (failed before, waiting for their backoff; 'inboxctl failures'
shows why), SCHEDULED (never failed, snoozed by their handler until later) and
BLOCKED (held behind a dead message of their ordering key: they wait for an
operator to replay or discard it, not for a worker). A message behind an
earlier one of its key that is still pending or running is not blocked: it
moves once that one is handled. JSON keeps "pending" as their sum and adds
"pending_fresh", "retrying", "scheduled", "blocked" and "next_retry_at"; the
outbox's "blocked" rows (behind a dead row of their key) are among its
"pending".

Every count but DONE is exact and cheap however large the inbox: it reads only
the small indexes of the rows it counts. DONE, the dedupe memory, can hold
tens of millions of rows; it is estimated from PostgreSQL's statistics of
the table (shown as ≈N, and "done_estimated": true in JSON) unless --exact
asks for a count, which reads every done row.

--check is for scripts and probes: after the usual output it lists what
on-call must act on, and exits ` + fmt.Sprint(ExitCheckFailed) + ` if anything: dead messages, failing
messages (retrying after a failure), dead outbox rows, and a stall: a
message (or outbox row) due for longer than --stall-after that no worker has
claimed, or a scheduled replay due that long, unfinished, while no
maintainer leads to run it.
-o json adds "check": {"ok", "problems": [{"kind", "consumer",
"count", "text"}]}.

The consumers and event types paused ('inboxctl pause') are listed under the
tables, with who paused them, since when and why ("pauses" in JSON). A pause
is deliberate: --check reports no stall for a consumer paused as a whole.`,
		Example: `  inboxctl stats
  inboxctl stats --watch
  inboxctl stats --exact
  inboxctl stats --check --stall-after 10m
  inboxctl stats -o json | jq '.consumers[] | select(.dead > 0)'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			if interval < 100*time.Millisecond {
				return usagef("--interval %s is too short: use 100ms or more", interval)
			}
			if check && watch {
				return usagef("--check reads once, for a script or a probe: drop --watch")
			}
			if stallAfter <= 0 {
				return usagef("--stall-after %s: use a positive duration, such as 5m", stallAfter)
			}
			for frame := 0; ; frame++ {
				st, err := a.admin.Stats(ctx, admin.StatsOptions{Exact: exact})
				if err != nil {
					return err
				}
				scheduled, err := a.admin.CountScheduledReplays(ctx)
				if err != nil {
					return err
				}
				pauses, err := a.admin.Pauses(ctx, "")
				if err != nil {
					return err
				}
				if watch && frame > 0 {
					if isTerminal(a.out) {
						fmt.Fprint(a.out, "\033[H\033[2J") // redraw in place
					} else {
						fmt.Fprintln(a.out)
					}
				}
				report := checkReport{OK: true} // no check asked for, none failed
				if check {
					overdue, err := a.admin.Overdue(ctx)
					if err != nil {
						return err
					}
					report = newCheckReport(a.statsProblems(st, overdue, stallAfter, pauses))
				}
				switch {
				case output == formatJSON:
					r := statsReport{Stats: st, Pauses: pauses}
					if pauses == nil {
						r.Pauses = []admin.Pause{}
					}
					if check {
						r.Check = &report
					}
					if err := writeJSON(a.out, r); err != nil {
						return err
					}
				default:
					a.printStats(st, !check) // --check's problems say what the footer would
					if scheduled > 0 {
						fmt.Fprintf(a.out, "%s waiting or under way: '%s' lists them.\n", plural(scheduled, "scheduled replay"), a.hint("scheduled"))
					}
					a.printPauses(pauses, st.At)
					if check {
						a.printCheck(report, fmt.Sprintf("no dead or failing messages, no dead outbox rows, no work due for more than %s", window(stallAfter)))
					}
				}
				if !watch {
					return checkErr(report)
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	outputFlag(cmd, &output, documentOutput)
	cmd.Flags().BoolVar(&exact, "exact", false, "count done messages one by one instead of estimating them (reads every done row)")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "redraw every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch redraws")
	cmd.Flags().BoolVar(&check, "check", false, "exit "+fmt.Sprint(ExitCheckFailed)+" if on-call must act: dead or failing messages, dead outbox rows, a stall, a scheduled replay no maintainer runs (for scripts and probes)")
	cmd.Flags().DurationVar(&stallAfter, "stall-after", 5*time.Minute, "with --check: due work unclaimed for longer than this is a stall")
	return cmd
}

// statsReport is stats -o json: the stats, the pauses in place and, with
// --check, the check.
type statsReport struct {
	*admin.Stats
	Check *checkReport `json:"check,omitempty"`
	// Pauses lists the pauses in place ([] when none), as 'inboxctl
	// pauses' does.
	Pauses []admin.Pause `json:"pauses"`
}

// printStats prints the stats' tables, their notes and, with footer, a
// line for each kind of trouble (dead, retrying, dead outbox rows) with
// the command that shows more.
func (a *app) printStats(st *admin.Stats, footer bool) {
	fmt.Fprintf(a.out, "pgbox schema %q at %s UTC\n\n", a.admin.Schema(), stamp(st.At))
	ageOf := func(d *admin.Duration) string {
		if d == nil {
			return "-"
		}
		return age(time.Duration(*d))
	}
	t := newTable(a.out)
	fmt.Fprintln(t, "INBOX\tFRESH\tRETRYING\tSCHEDULED\tBLOCKED\tRUNNING\tDEAD\tDISCARDED\tDONE\tOLDEST PENDING\tDONE LAST 1M\tDONE LAST 1H")
	var sum inboxSums
	for _, c := range st.Consumers {
		done := count(c.Done)
		if c.DoneEstimated {
			done = "≈" + done
		}
		minute, hour := count(c.ProcessedLastMinute), count(c.ProcessedLastHour)
		if c.ProcessedLastMinuteEstimated {
			minute = "≈" + minute
		}
		if c.ProcessedLastHourEstimated {
			hour = "≈" + hour
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(c.Consumer), count(c.PendingFresh), count(c.Retrying),
			count(c.Scheduled), count(c.Blocked), count(c.Running), count(c.Dead), count(c.Discarded), done, ageOf(c.OldestPending), minute, hour)
		sum.add(c)
	}
	if len(st.Consumers) == 0 {
		fmt.Fprintln(t, "(no messages)")
	}
	_ = t.Flush()
	fmt.Fprintln(a.out)
	o := st.Outbox
	t = newTable(a.out)
	fmt.Fprintln(t, "OUTBOX\tPENDING\tBLOCKED\tRUNNING\tDEAD\tPUBLISHED\tOLDEST UNPUBLISHED")
	published := count(o.Published)
	if o.PublishedEstimated {
		published = "≈" + published
	}
	fmt.Fprintf(t, "\t%s\t%s\t%s\t%s\t%s\t%s\n", count(o.Pending), count(o.Blocked), count(o.Running), count(o.Dead), published, ageOf(o.OldestUnpublished))
	_ = t.Flush()
	switch {
	case sum.estimated && o.PublishedEstimated:
		fmt.Fprintf(a.out, "\n≈ DONE and PUBLISHED are estimated from PostgreSQL's statistics: '%s' counts every row.\n", a.hint("stats", "--exact"))
	case sum.estimated:
		fmt.Fprintf(a.out, "\n≈ DONE is estimated from PostgreSQL's statistics of the inbox: '%s' counts every done row.\n", a.hint("stats", "--exact"))
	case o.PublishedEstimated:
		fmt.Fprintf(a.out, "\n≈ PUBLISHED is estimated from PostgreSQL's statistics of the outbox: '%s' counts every published row.\n", a.hint("stats", "--exact"))
	}
	if sum.rateEstimated {
		if !sum.estimated && !o.PublishedEstimated { // the first ≈ note
			fmt.Fprintln(a.out)
		}
		fmt.Fprintln(a.out, "≈ DONE LAST 1H (and 1M, past 330 a second) is estimated: the rate over the newest 20,000 done messages, times the window.")
	}
	if !footer {
		return
	}
	if sum.dead > 0 || sum.retrying > 0 || o.Dead > 0 {
		fmt.Fprintln(a.out)
	}
	if sum.dead > 0 {
		fmt.Fprintf(a.out, "%s in the inbox: '%s' groups them by cause.\n", plural(sum.dead, "dead message"), a.hint(sum.failuresArgs()...))
	}
	if sum.blocked > 0 {
		fmt.Fprintf(a.out, "%s held behind a dead message of their ordering key: they move once it is replayed or discarded.\n",
			plural(sum.blocked, "message"))
	}
	if sum.retrying > 0 {
		fmt.Fprintf(a.out, "%s retrying after a failure, the next %s: '%s' shows why.\n",
			plural(sum.retrying, "message"), due(*sum.nextRetry, st.At), a.hint(sum.failuresArgs()...))
	}
	if o.Dead > 0 {
		fmt.Fprintf(a.out, "%s in the outbox: '%s' shows them.\n", plural(o.Dead, "dead row"), a.hint("outbox", "list", "--status", "dead"))
	}
	if o.Blocked > 0 {
		fmt.Fprintf(a.out, "%s held behind a dead outbox row of their ordering key: published once it is retried.\n", plural(o.Blocked, "outbox row"))
	}
}

// inboxSums adds up what printStats's footer says of every consumer.
type inboxSums struct {
	dead, retrying, blocked int64
	estimated               bool
	// rateEstimated: a DONE LAST column is estimated (see
	// admin.ConsumerStats.ProcessedLastHourEstimated).
	rateEstimated bool
	// failing names the consumers with dead or retrying messages.
	failing   []string
	nextRetry *time.Time
}

func (s *inboxSums) add(c admin.ConsumerStats) {
	s.dead += c.Dead
	s.retrying += c.Retrying
	s.blocked += c.Blocked
	s.estimated = s.estimated || c.DoneEstimated
	s.rateEstimated = s.rateEstimated || c.ProcessedLastHourEstimated
	if c.Dead > 0 || c.Retrying > 0 {
		s.failing = append(s.failing, c.Consumer)
	}
	if c.NextRetryAt != nil && (s.nextRetry == nil || c.NextRetryAt.Before(*s.nextRetry)) {
		s.nextRetry = c.NextRetryAt
	}
}

// failuresArgs is the failures command that shows the failing messages:
// of their consumer, when only one consumer has any.
func (s *inboxSums) failuresArgs() []string {
	if len(s.failing) == 1 {
		return []string{"failures", "--consumer", s.failing[0]}
	}
	return []string{"failures"}
}

// due says when a retry at t is due, seen at now: "due now", or "due
// 2026-11-23 03:00:00 UTC (in 1h59m)".
func due(t, now time.Time) string {
	if !t.After(now) {
		return "due now"
	}
	return fmt.Sprintf("due %s UTC (in %s)", stamp(t), age(t.Sub(now)))
}

func (a *app) listCommand() *cobra.Command {
	var (
		f      filterFlags
		limit  int
		output string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List inbox messages, newest first",
		Example: `  inboxctl list --status dead
  inboxctl list --consumer payments --type OrderPlaced --since 2h
  inboxctl list --error-contains timeout --limit 10
  inboxctl list --status dead --limit 0 -o jsonl > dead.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			filter, err := f.filter(a.now())
			if err != nil {
				return err
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			return a.list(ctx, filter, limit, output, "raise --limit (0 for all) or narrow the filter to see more.")
		},
	}
	f.add(cmd, true)
	limitFlag(cmd, &limit, 50, "at most this many messages; 0 for all")
	outputFlag(cmd, &output, listOutput)
	return cmd
}

// list prints the messages f selects, newest first, at most limit (0 for
// all); when the limit cuts the table short it says so and what to do:
// more names a flag of the command that ran.
func (a *app) list(ctx context.Context, f admin.Filter, limit int, output, more string) error {
	opts := admin.ListOptions{Filter: f, Limit: limit}
	switch output {
	case formatJSONL:
		n := 0
		if err := a.admin.List(ctx, opts, func(m admin.Message) error { n++; return writeJSONLine(a.out, m) }); err != nil || n > 0 {
			return err
		}
		return a.unknownConsumer(ctx, f.Consumer)
	case formatJSON:
		msgs := []admin.Message{}
		if err := a.admin.List(ctx, opts, func(m admin.Message) error { msgs = append(msgs, m); return nil }); err != nil {
			return err
		}
		if len(msgs) == 0 {
			if err := a.unknownConsumer(ctx, f.Consumer); err != nil {
				return err
			}
		}
		return writeJSON(a.out, msgs)
	}
	t := newTable(a.out)
	fmt.Fprintln(t, "RECEIVED (UTC)\tCONSUMER\tID\tTYPE\tKEY\tSTATUS\tATTEMPTS\tREPLAYS\tLAST ERROR")
	n := 0
	err := a.admin.List(ctx, opts, func(m admin.Message) error {
		n++
		lastError := "-"
		if m.LastError != nil {
			lastError = cell(*m.LastError, 70)
		}
		_, err := fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", stamp(m.ReceivedAt), clean(m.Consumer), clean(m.ID), clean(m.EventType),
			orDash(cell(m.OrderingKey, 30)), m.Status, m.Attempts, m.MaxAttempts, m.Replays, lastError)
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		if err := a.unknownConsumer(ctx, f.Consumer); err != nil {
			return err
		}
	}
	if err := t.Flush(); err != nil {
		return err
	}
	switch {
	case n == 0:
		// A group of another consumer than --consumer's would look
		// drained: say whose it is.
		if owners := a.groupElsewhere(ctx, f); owners != nil {
			fmt.Fprintf(a.out, "(no messages match: %s)\n", groupOwners(f.Fingerprint, owners, f.Consumer))
		} else {
			fmt.Fprintln(a.out, "(no messages match)")
		}
	case limit > 0 && n == limit:
		fmt.Fprintf(a.out, "\nShowing the newest %d; %s\n", n, more)
	}
	return nil
}

func (a *app) showCommand() *cobra.Command {
	var (
		consumer, output string
		full             bool
	)
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one inbox message: metadata, payload and every attempt's error",
		Long: `show prints one inbox message: its state, metadata, payload and history (every
failed attempt, replay, discard and edit). The payload is shown as indented
JSON, as text, or as a hex dump, cut to its first ` + fmt.Sprint(payloadShownLines) + ` lines (` + count(payloadShownChars) + ` characters)
unless --full; -o json always has all of it (base64, and as JSON when it is).
Control characters in any of it are shown escaped (\x1b).`,
		Example: `  inboxctl show order-17/placed --consumer payments
  inboxctl show order-17/placed --full
  inboxctl show order-17/placed -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			id := args[0]
			if consumer == "" {
				consumers, err := a.admin.ConsumersOf(ctx, id)
				if err != nil {
					return err
				}
				switch len(consumers) {
				case 0:
					return fmt.Errorf("message %q: %w in schema %s", id, admin.ErrNotFound, a.admin.Schema())
				case 1:
					consumer = consumers[0]
				default:
					return usagef("message %q is held by several consumers (%s): pick one with --consumer", id, cleanList(consumers))
				}
			}
			d, err := a.admin.Show(ctx, consumer, id)
			if errors.Is(err, admin.ErrNotFound) {
				return fmt.Errorf("message %q of consumer %q: %w", id, consumer, err)
			}
			if err != nil {
				return err
			}
			if output == formatJSON {
				return writeJSON(a.out, withPayloadJSON(d))
			}
			a.printDetail(d, full)
			return nil
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "the consumer holding the message (needed only if several do)")
	cmd.Flags().BoolVar(&full, "full", false, "print all of the payload, however large (by default: its first "+fmt.Sprint(payloadShownLines)+" lines)")
	outputFlag(cmd, &output, documentOutput)
	return cmd
}

// detailJSON is show's JSON: the payload in base64 (payload) and, when it
// is JSON, as JSON too (payload_json).
type detailJSON struct {
	*admin.Detail
	PayloadJSON json.RawMessage `json:"payload_json,omitempty"`
}

func withPayloadJSON(d *admin.Detail) detailJSON {
	out := detailJSON{Detail: d}
	if kind, _ := renderPayload(d.Payload); kind == "JSON" {
		out.PayloadJSON = d.Payload
	}
	return out
}

func (a *app) printDetail(d *admin.Detail, full bool) {
	t := newTable(a.out)
	row := func(k, v string) { fmt.Fprintf(t, "%s\t%s\n", k, v) }
	row("ID", clean(d.ID))
	row("Consumer", clean(d.Consumer))
	row("Type", clean(d.EventType))
	status := fmt.Sprintf("%s, %d of %d attempts used", d.Status, d.Attempts, d.MaxAttempts)
	if d.Replays > 0 {
		status += ", replayed " + plural(int64(d.Replays), "time")
	}
	row("Status", status)
	if d.OrderingKey != "" {
		row("Ordering key", clean(d.OrderingKey))
	}
	row("Received", stamp(d.ReceivedAt)+" UTC")
	switch {
	case d.BlockedBy != nil:
		h := d.BlockedBy
		row("Blocked", fmt.Sprintf("ordering key %s is held by %s (dead since %s UTC, %s): replay or discard it",
			clean(d.OrderingKey), clean(h.ID), stamp(h.DeadSince), plural(int64(h.Attempts), "attempt")))
		row("", a.hint("show", h.ID, "--consumer", d.Consumer))
		row("", a.hint("replay", h.ID, "--consumer", d.Consumer))
		row("", a.hint("discard", h.ID, "--consumer", d.Consumer, "--reason", "REASON"))
	case d.Status == pgbox.InboxPending:
		row("Next attempt", stamp(d.AvailableAt)+" UTC")
	case d.Status == pgbox.InboxRunning:
		row("Lease ends", stamp(d.AvailableAt)+" UTC")
	case d.Status == pgbox.InboxDone:
		if d.ProcessedAt != nil {
			row("Processed", stamp(*d.ProcessedAt)+" UTC")
		}
	}
	if d.Conflicts > 0 {
		row("Conflicts", plural(int64(d.Conflicts), "redelivery")+" with another payload (kept in inbox_conflicts)")
	}
	_ = t.Flush()

	a.printMetadata(d.Metadata)
	a.printPayload(d.Payload, full, a.hint("show", d.ID, "--consumer", d.Consumer, "--full"))
	a.printHistory(d.History)
}

// printMetadata prints a message's metadata, a key a line, sorted.
func (a *app) printMetadata(metadata map[string]string) {
	fmt.Fprintln(a.out, "\nMetadata")
	if len(metadata) == 0 {
		fmt.Fprintln(a.out, "  (none)")
	}
	for _, k := range slices.Sorted(maps.Keys(metadata)) {
		fmt.Fprintf(a.out, "  %s: %s\n", clean(k), clean(metadata[k]))
	}
}

func (a *app) printHistory(h []admin.HistoryEntry) {
	fmt.Fprintf(a.out, "\nHistory (%d)\n", len(h))
	if len(h) == 0 {
		fmt.Fprintln(a.out, "  (no failures)")
	}
	for _, e := range h {
		switch e.Action {
		case "":
			// An error of several lines (errors.Join's) keeps them, indented
			// under the first.
			fmt.Fprintf(a.out, "  %s  attempt %d failed: %s\n", stamp(e.At), e.Attempt,
				strings.ReplaceAll(cleanBlock(strings.TrimRight(e.Error, "\n")), "\n", "\n      "))
			if e.Trace != "" {
				fmt.Fprintln(a.out, indent(cleanBlock(strings.TrimRight(e.Trace, "\n")), "      "))
			}
		case "replayed":
			line := fmt.Sprintf("  %s  replayed by an operator (replay %d; was %s after %s)", stamp(e.At), e.Replay,
				clean(string(e.PreviousStatus)), plural(int64(e.PreviousAttempts), "attempt"))
			if e.Note != "" {
				line += ": " + clean(e.Note)
			}
			fmt.Fprintln(a.out, line)
		case "discarded":
			fmt.Fprintf(a.out, "  %s  discarded by an operator: %s\n", stamp(e.At), clean(e.Note))
		case "edited":
			fmt.Fprintf(a.out, "  %s  payload edited by an operator (%d bytes, was %d; the original is kept; audit record %d)\n",
				stamp(e.At), e.Size, e.PreviousSize, e.AuditID)
		case "retried":
			fmt.Fprintf(a.out, "  %s  retried by an operator (was dead after %s)\n", stamp(e.At), plural(int64(e.PreviousAttempts), "attempt"))
		default:
			fmt.Fprintf(a.out, "  %s  %s\n", stamp(e.At), clean(e.Action))
		}
	}
}

func (a *app) failuresCommand() *cobra.Command {
	var (
		consumer, output, since string
		buckets, limit          int
		trend, exact            bool
	)
	cmd := &cobra.Command{
		Use:   "failures",
		Short: "Group dead and failing messages by cause",
		Long: `failures groups the dead and failing (retrying after a failure) messages by
consumer, event type and error pattern: the error text with ids, quoted values,
numbers and timestamps replaced by placeholders, so that 412 messages that
failed the same way show as one line. Each line's FINGERPRINT names that group,
consumer included: 'inboxctl list --group FINGERPRINT' lists it,
'inboxctl replay --group FINGERPRINT' replays it, and each acts on that line's
messages only.

FIRST FAILURE and LAST FAILURE are the earliest and latest failed attempt in
the histories of the group's messages (not when the messages arrived).

Is it still failing? --since 1h keeps the groups with a failed attempt in the
last hour and counts those attempts (IN 1H); --trend splits that window into
--buckets buckets (default 12) and shows each group's failed attempts per
bucket, oldest first, as a sparkline (· for none); JSON gives the counts
("trend"). --trend without --since looks at the last hour. What is counted is
failed attempts recorded in the histories of the messages still in a group
(dead or failing), by the database's clock: a message that failed and then
succeeded, or was discarded, has left its group, and its attempts with it.

It reads the newest 2,000 dead and failing messages, so that it answers at
once however many there are. If there are more, every count is marked ≥ (at
least that many), a group none of them is in is missing, and a line under the
table says so; --exact reads them all, which takes seconds at a million.`,
		Example: `  inboxctl failures
  inboxctl failures --consumer payments -o json
  inboxctl failures --since 1h
  inboxctl failures --trend --since 6h --buckets 12`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			opts := admin.FailuresOptions{Consumer: consumer, Limit: limit, Exact: exact}
			if since != "" {
				d, err := parseDuration(since)
				if err != nil || d <= 0 {
					return usagef("--since %q is not a window such as 30m, 1h or 7d", since)
				}
				opts.Since = d
			}
			if trend {
				if buckets < 1 || buckets > 100 {
					return usagef("--buckets %d: use 1 to 100", buckets)
				}
				opts.Buckets = buckets
				opts.Since = cmp.Or(opts.Since, time.Hour)
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			groups, err := a.admin.Failures(ctx, opts)
			if err != nil {
				return err
			}
			if len(groups) == 0 {
				if err := a.unknownConsumer(ctx, consumer); err != nil {
					return err
				}
			}
			if output != formatTable {
				return writeList(a.out, output, groups)
			}
			return a.printFailures(groups, opts)
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "only this consumer's messages")
	limitFlag(cmd, &limit, 50, "at most this many groups")
	cmd.Flags().StringVar(&since, "since", "", "only groups with a failed attempt in this window (30m, 1h, 7d), with their count in it")
	cmd.Flags().BoolVar(&trend, "trend", false, "show failed attempts per bucket of the --since window (default 1h)")
	cmd.Flags().IntVar(&buckets, "buckets", 12, "how many buckets --trend splits the window into")
	cmd.Flags().BoolVar(&exact, "exact", false, "read every dead and failing message, not the newest 2,000 (seconds at a million)")
	outputFlag(cmd, &output, listOutput)
	return cmd
}

func (a *app) printFailures(groups []admin.FailureGroup, opts admin.FailuresOptions) error {
	if len(groups) == 0 {
		if opts.Since > 0 {
			fmt.Fprintf(a.out, "No dead or failing message failed in the last %s.\n", window(opts.Since))
		} else {
			fmt.Fprintln(a.out, "No dead or failing messages.")
		}
		return nil
	}
	cols := ""
	if opts.Since > 0 {
		cols = "\tIN " + strings.ToUpper(window(opts.Since))
	}
	if opts.Buckets > 0 {
		cols += "\tTREND"
	}
	t := newTable(a.out)
	fmt.Fprintln(t, "COUNT\tDEAD\tFAILING\tCONSUMER\tTYPE\tFINGERPRINT\tFIRST FAILURE\tLAST FAILURE"+cols+"\tERROR")
	partial := false
	for _, g := range groups {
		// A partial group's counts are lower bounds: "≥834".
		n := func(v int64) string {
			if g.Partial {
				return "≥" + count(v)
			}
			return count(v)
		}
		partial = partial || g.Partial
		cols := ""
		if opts.Since > 0 {
			cols = "\t" + n(g.FailuresInWindow)
		}
		if g.Trend != nil {
			cols += "\t" + sparkline(g.Trend.Counts)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s%s\t%s\n", n(g.Count), n(g.Dead), n(g.Failing), clean(g.Consumer),
			clean(g.EventType), clean(g.Fingerprint), stampOrDash(g.FirstFailedAt), stampOrDash(g.LastFailedAt), cols, cell(g.Normalized, 70))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if opts.Buckets > 0 {
		fmt.Fprintf(a.out, "\nTREND: failed attempts per %s over the last %s, oldest first (· none).\n",
			window(opts.Since/time.Duration(opts.Buckets)), window(opts.Since))
	}
	g := groups[0]
	if partial {
		args := []string{"failures", "--exact"}
		if opts.Consumer != "" {
			args = append(args, "--consumer", opts.Consumer)
		}
		if opts.Since > 0 {
			args = append(args, "--since", window(opts.Since))
		}
		if opts.Buckets > 0 {
			args = append(args, "--trend", "--buckets", strconv.Itoa(opts.Buckets))
		}
		fmt.Fprintf(a.out, "\n≥ More than %s dead and failing messages: the groups are counted from the newest %s, so a count\n"+
			"is at least what it says and a group with none of them is missing. Count them all (seconds at a million): %s\n",
			count(admin.FailuresReadDefault), count(admin.FailuresReadDefault), a.hint(args...))
	}
	fmt.Fprintf(a.out, "\nSee one: %s\n", a.hint("show", g.SampleID, "--consumer", g.Consumer))
	fmt.Fprintf(a.out, "List a group: %s\n", a.hint("list", "--group", g.Fingerprint, "--consumer", g.Consumer))
	fmt.Fprintf(a.out, "Replay a group: %s\n", a.hint("replay", "--group", g.Fingerprint, "--consumer", g.Consumer))
	return nil
}

// stampOrDash is stamp, or "-" for no time.
func stampOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

// sparkline draws counts as one character each, scaled to the largest:
// · for none, ▁ to █ for some.
func sparkline(counts []int64) string {
	const bars = "▁▂▃▄▅▆▇█"
	levels := []rune(bars)
	top := slices.Max(counts)
	var b strings.Builder
	for _, n := range counts {
		if n == 0 {
			b.WriteRune('·')
			continue
		}
		b.WriteRune(levels[(n*int64(len(levels))-1)/top])
	}
	return b.String()
}

// printPauses lists the pauses in place under stats' tables, one a line,
// with their ages at now and the command that lifts each; nothing when
// none is.
func (a *app) printPauses(pauses []admin.Pause, now time.Time) {
	if len(pauses) == 0 {
		return
	}
	fmt.Fprintf(a.out, "\nPaused (their messages wait; '%s' lists the pauses):\n", a.hint("pauses"))
	for _, p := range pauses {
		fmt.Fprintf(a.out, "- %s. Resume: %s\n", pauseLine(p, now), a.hint(resumeArgs(p.Consumer, p.EventType)...))
	}
}
