package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

func (a *app) statsCommand() *cobra.Command {
	var (
		output   string
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count messages per consumer and status, and the outbox backlog",
		Long: `stats counts each consumer's inbox messages by status, with the age of its oldest
pending message and how many it finished in the last minute and hour, and the
outbox's backlog with the age of its oldest unpublished message.`,
		Example: `  inboxctl stats
  inboxctl stats --watch
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
			for frame := 0; ; frame++ {
				st, err := a.admin.Stats(ctx)
				if err != nil {
					return err
				}
				scheduled, err := a.admin.CountScheduledReplays(ctx)
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
				if output == formatJSON {
					if err := writeJSON(a.out, st); err != nil {
						return err
					}
				} else {
					a.printStats(st)
					if scheduled > 0 {
						fmt.Fprintf(a.out, "%s waiting or under way: 'inboxctl scheduled' lists them.\n", plural(scheduled, "scheduled replay"))
					}
				}
				if !watch {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	outputFlag(cmd, &output, formatTable, formatJSON)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "redraw every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch redraws")
	return cmd
}

func (a *app) printStats(st *admin.Stats) {
	fmt.Fprintf(a.out, "pgbox schema %q at %s UTC\n\n", a.admin.Schema(), stamp(st.At))
	ageOf := func(d *admin.Duration) string {
		if d == nil {
			return "-"
		}
		return age(time.Duration(*d))
	}
	t := newTable(a.out)
	fmt.Fprintln(t, "INBOX\tPENDING\tRUNNING\tDEAD\tDISCARDED\tDONE\tOLDEST PENDING\tDONE LAST 1M\tDONE LAST 1H")
	var dead int64
	for _, c := range st.Consumers {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Consumer, count(c.Pending), count(c.Running), count(c.Dead),
			count(c.Discarded), count(c.Done), ageOf(c.OldestPending), count(c.ProcessedLastMinute), count(c.ProcessedLastHour))
		dead += c.Dead
	}
	if len(st.Consumers) == 0 {
		fmt.Fprintln(t, "(no messages)")
	}
	_ = t.Flush()
	fmt.Fprintln(a.out)
	o := st.Outbox
	t = newTable(a.out)
	fmt.Fprintln(t, "OUTBOX\tPENDING\tRUNNING\tDEAD\tPUBLISHED\tOLDEST UNPUBLISHED")
	fmt.Fprintf(t, "\t%s\t%s\t%s\t%s\t%s\n", count(o.Pending), count(o.Running), count(o.Dead), count(o.Published), ageOf(o.OldestUnpublished))
	_ = t.Flush()
	if dead > 0 {
		fmt.Fprintf(a.out, "\n%s in the inbox: 'inboxctl failures' groups them by cause.\n", plural(dead, "dead message"))
	}
	if o.Dead > 0 {
		fmt.Fprintf(a.out, "%s in the outbox: 'inboxctl outbox list --status dead' shows them.\n", plural(o.Dead, "dead row"))
	}
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
			return a.list(ctx, filter, limit, output)
		},
	}
	f.add(cmd, true)
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many messages; 0 for all")
	outputFlag(cmd, &output, formatTable, formatJSON, formatJSONL)
	return cmd
}

func (a *app) list(ctx context.Context, f admin.Filter, limit int, output string) error {
	opts := admin.ListOptions{Filter: f, Limit: limit}
	switch output {
	case formatJSONL:
		return a.admin.List(ctx, opts, func(m admin.Message) error { return writeJSONLine(a.out, m) })
	case formatJSON:
		msgs := []admin.Message{}
		if err := a.admin.List(ctx, opts, func(m admin.Message) error { msgs = append(msgs, m); return nil }); err != nil {
			return err
		}
		return writeJSON(a.out, msgs)
	}
	t := newTable(a.out)
	fmt.Fprintln(t, "RECEIVED (UTC)\tCONSUMER\tID\tTYPE\tSTATUS\tATTEMPTS\tREPLAYS\tLAST ERROR")
	n := 0
	err := a.admin.List(ctx, opts, func(m admin.Message) error {
		n++
		lastError := "-"
		if m.LastError != nil {
			lastError = oneLine(*m.LastError, 70)
		}
		_, err := fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", stamp(m.ReceivedAt), m.Consumer, m.ID, m.EventType,
			m.Status, m.Attempts, m.MaxAttempts, m.Replays, lastError)
		return err
	})
	if err != nil {
		return err
	}
	if err := t.Flush(); err != nil {
		return err
	}
	switch {
	case n == 0:
		fmt.Fprintln(a.out, "(no messages match)")
	case limit > 0 && n == limit:
		fmt.Fprintf(a.out, "\nShowing the newest %d; raise --limit (0 for all) or narrow the filter to see more.\n", n)
	}
	return nil
}

func (a *app) showCommand() *cobra.Command {
	var (
		consumer, output string
	)
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one inbox message: metadata, payload and every attempt's error",
		Example: `  inboxctl show order-17/placed --consumer payments
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
					return usagef("message %q is held by several consumers (%s): pick one with --consumer", id, strings.Join(consumers, ", "))
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
			a.printDetail(d)
			return nil
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "the consumer holding the message (needed only if several do)")
	outputFlag(cmd, &output, formatTable, formatJSON)
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

func (a *app) printDetail(d *admin.Detail) {
	t := newTable(a.out)
	row := func(k, v string) { fmt.Fprintf(t, "%s\t%s\n", k, v) }
	row("ID", d.ID)
	row("Consumer", d.Consumer)
	row("Type", d.EventType)
	status := fmt.Sprintf("%s, %d of %d attempts used", d.Status, d.Attempts, d.MaxAttempts)
	if d.Replays > 0 {
		status += ", replayed " + plural(int64(d.Replays), "time")
	}
	row("Status", status)
	if d.OrderingKey != "" {
		row("Ordering key", d.OrderingKey)
	}
	row("Received", stamp(d.ReceivedAt)+" UTC")
	switch d.Status {
	case pgbox.InboxPending:
		row("Next attempt", stamp(d.AvailableAt)+" UTC")
	case pgbox.InboxRunning:
		row("Lease ends", stamp(d.AvailableAt)+" UTC")
	case pgbox.InboxDone:
		if d.ProcessedAt != nil {
			row("Processed", stamp(*d.ProcessedAt)+" UTC")
		}
	}
	if d.Conflicts > 0 {
		row("Conflicts", plural(int64(d.Conflicts), "redelivery")+" with another payload (kept in inbox_conflicts)")
	}
	_ = t.Flush()

	fmt.Fprintln(a.out, "\nMetadata")
	if len(d.Metadata) == 0 {
		fmt.Fprintln(a.out, "  (none)")
	}
	for _, k := range slices.Sorted(maps.Keys(d.Metadata)) {
		fmt.Fprintf(a.out, "  %s: %s\n", k, d.Metadata[k])
	}
	kind, text := renderPayload(d.Payload)
	fmt.Fprintf(a.out, "\nPayload (%s, %d bytes)\n", kind, len(d.Payload))
	if text != "" {
		fmt.Fprintln(a.out, indent(text, "  "))
	}
	a.printHistory(d.History)
}

func (a *app) printHistory(h []admin.HistoryEntry) {
	fmt.Fprintf(a.out, "\nHistory (%d)\n", len(h))
	if len(h) == 0 {
		fmt.Fprintln(a.out, "  (no failures)")
	}
	for _, e := range h {
		switch e.Action {
		case "":
			fmt.Fprintf(a.out, "  %s  attempt %d failed: %s\n", stamp(e.At), e.Attempt, e.Error)
			if e.Trace != "" {
				fmt.Fprintln(a.out, indent(strings.TrimRight(e.Trace, "\n"), "      "))
			}
		case "replayed":
			line := fmt.Sprintf("  %s  replayed by an operator (replay %d; was %s after %s)", stamp(e.At), e.Replay, e.PreviousStatus, plural(int64(e.PreviousAttempts), "attempt"))
			if e.Note != "" {
				line += ": " + e.Note
			}
			fmt.Fprintln(a.out, line)
		case "discarded":
			fmt.Fprintf(a.out, "  %s  discarded by an operator: %s\n", stamp(e.At), e.Note)
		case "edited":
			fmt.Fprintf(a.out, "  %s  payload edited by an operator (%d bytes, was %d; the original is kept; audit record %d)\n",
				stamp(e.At), e.Size, e.PreviousSize, e.AuditID)
		case "retried":
			fmt.Fprintf(a.out, "  %s  retried by an operator (was dead after %s)\n", stamp(e.At), plural(int64(e.PreviousAttempts), "attempt"))
		default:
			fmt.Fprintf(a.out, "  %s  %s\n", stamp(e.At), e.Action)
		}
	}
}

func (a *app) failuresCommand() *cobra.Command {
	var (
		consumer, output string
		limit            int
	)
	cmd := &cobra.Command{
		Use:   "failures",
		Short: "Group dead and failing messages by cause",
		Long: `failures groups the dead and failing (retrying after a failure) messages by
consumer, event type and error fingerprint: the error text with ids, quoted
values, numbers and timestamps replaced by placeholders, so that 412 messages
that failed the same way show as one line. Replay a group with
'inboxctl replay --group FINGERPRINT', or list it with 'inboxctl list --group'.`,
		Example: `  inboxctl failures
  inboxctl failures --consumer payments -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			groups, err := a.admin.Failures(ctx, admin.FailuresOptions{Consumer: consumer, Limit: limit})
			if err != nil {
				return err
			}
			if output == formatJSON {
				if groups == nil {
					groups = []admin.FailureGroup{}
				}
				return writeJSON(a.out, groups)
			}
			if len(groups) == 0 {
				fmt.Fprintln(a.out, "No dead or failing messages.")
				return nil
			}
			t := newTable(a.out)
			fmt.Fprintln(t, "COUNT\tDEAD\tFAILING\tCONSUMER\tTYPE\tFINGERPRINT\tFIRST RECEIVED\tLAST RECEIVED\tERROR")
			for _, g := range groups {
				fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", count(g.Count), count(g.Dead), count(g.Failing), g.Consumer,
					g.EventType, g.Fingerprint, stamp(g.FirstSeen), stamp(g.LastSeen), oneLine(g.Normalized, 70))
			}
			if err := t.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "\nSee one: inboxctl show %s --consumer %s\n", groups[0].SampleID, groups[0].Consumer)
			fmt.Fprintf(a.out, "Replay a group: inboxctl replay --group %s\n", groups[0].Fingerprint)
			return nil
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "only this consumer's messages")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many groups")
	outputFlag(cmd, &output, formatTable, formatJSON)
	return cmd
}
