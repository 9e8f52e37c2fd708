package cli

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

func (a *app) outboxCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Inspect and retry the outbox's unpublished and dead rows",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(a.outboxListCommand(), a.outboxShowCommand(), a.outboxRetryCommand())
	return cmd
}

func (a *app) outboxListCommand() *cobra.Command {
	var (
		statusFlags []string
		topic, key  string
		output      string
		limit       int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List outbox rows, newest first",
		Example: `  inboxctl outbox list --status dead
  inboxctl outbox list --status pending,running --topic orders
  inboxctl outbox list --ordering-key customer-7
  inboxctl outbox list --limit 0 -o jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			f := admin.OutboxListOptions{Filter: admin.OutboxFilter{OrderingKey: key, Statuses: statuses[pgbox.OutboxStatus](statusFlags), Topic: topic}, Limit: limit}
			if err := f.Filter.Validate(); err != nil {
				return usageError{err} // a misspelt --status, as inboxctl list's
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			switch output {
			case formatJSONL:
				return a.admin.OutboxList(ctx, f, func(m admin.OutboxMessage) error { return writeJSONLine(a.out, m) })
			case formatJSON:
				rows := []admin.OutboxMessage{}
				if err := a.admin.OutboxList(ctx, f, func(m admin.OutboxMessage) error { rows = append(rows, m); return nil }); err != nil {
					return err
				}
				return writeJSON(a.out, rows)
			}
			t := newTable(a.out)
			fmt.Fprintln(t, "CREATED (UTC)\tID\tTOPIC\tTYPE\tKEY\tSTATUS\tATTEMPTS\tLAST ERROR")
			n := 0
			err := a.admin.OutboxList(ctx, f, func(m admin.OutboxMessage) error {
				n++
				lastError := "-"
				if m.LastError != nil {
					lastError = cell(*m.LastError, 70)
				}
				_, err := fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", stamp(m.CreatedAt), m.ID, clean(m.Topic), clean(m.EventType),
					orDash(cell(m.OrderingKey, 30)), m.Status, m.Attempts, lastError)
				return err
			})
			if err != nil {
				return err
			}
			if err := t.Flush(); err != nil {
				return err
			}
			if n == 0 {
				fmt.Fprintln(a.out, "(no rows match)")
			} else if limit > 0 && n == limit {
				fmt.Fprintf(a.out, "\nShowing the newest %d; raise --limit (0 for all) or narrow the filter to see more.\n", n)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&statusFlags, "status", nil, "only these statuses: pending, running, published, dead (comma-separated)")
	cmd.Flags().StringVar(&topic, "topic", "", "only this topic")
	cmd.Flags().StringVar(&key, "ordering-key", "", "only the rows of this ordering key")
	limitFlag(cmd, &limit, 50, "at most this many rows; 0 for all")
	outputFlag(cmd, &output, listOutput)
	return cmd
}

func (a *app) outboxShowCommand() *cobra.Command {
	var (
		full   bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one outbox row: metadata, payload and every failed publish",
		Long: `outbox show prints one outbox row: its state, metadata, payload and history. The
payload is cut to its first ` + fmt.Sprint(payloadShownLines) + ` lines (` + count(payloadShownChars) + ` characters) unless --full; -o json
always has all of it.`,
		Example: `  inboxctl outbox show 019a2f0e-7b1c-7d3e-9f00-1a2b3c4d5e6f
  inboxctl outbox show 019a2f0e-7b1c-7d3e-9f00-1a2b3c4d5e6f --full`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, err := uuid.Parse(args[0])
			if err != nil {
				return usagef("%q is not an outbox id: outbox ids are UUIDs", args[0])
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			d, err := a.admin.OutboxShow(ctx, id)
			if errors.Is(err, admin.ErrNotFound) {
				return fmt.Errorf("outbox row %s: %w", id, err)
			}
			if err != nil {
				return err
			}
			if output == formatJSON {
				return writeJSON(a.out, d)
			}
			t := newTable(a.out)
			row := func(k, v string) { fmt.Fprintf(t, "%s\t%s\n", k, v) }
			row("ID", d.ID.String())
			row("Topic", clean(d.Topic))
			row("Type", clean(d.EventType))
			status := fmt.Sprintf("%s after %s", d.Status, plural(int64(d.Attempts), "attempt"))
			if d.Replays > 0 {
				status += ", retried by an operator " + plural(int64(d.Replays), "time")
			}
			row("Status", status)
			if d.OrderingKey != "" {
				row("Ordering key", clean(d.OrderingKey))
			}
			row("Created", stamp(d.CreatedAt)+" UTC")
			switch {
			case d.BlockedBy != nil:
				h := d.BlockedBy
				row("Blocked", fmt.Sprintf("ordering key %s is held by outbox row %s (dead since %s UTC, %s): retry it",
					clean(d.OrderingKey), clean(h.ID), stamp(h.DeadSince), plural(int64(h.Attempts), "attempt")))
				row("", a.hint("outbox", "show", h.ID))
				row("", a.hint("outbox", "retry", h.ID))
			case d.PublishedAt != nil:
				row("Published", stamp(*d.PublishedAt)+" UTC")
			case d.Status == pgbox.OutboxPending:
				row("Next attempt", stamp(d.AvailableAt)+" UTC")
			case d.Status == pgbox.OutboxRunning:
				row("Lease ends", stamp(d.AvailableAt)+" UTC")
			}
			_ = t.Flush()
			a.printMetadata(d.Metadata)
			a.printPayload(d.Payload, full, a.hint("outbox", "show", d.ID.String(), "--full"))
			a.printHistory(d.History)
			return nil
		},
	}
	outputFlag(cmd, &output, documentOutput)
	cmd.Flags().BoolVar(&full, "full", false, "print all of the payload, however large (by default: its first "+fmt.Sprint(payloadShownLines)+" lines)")
	return cmd
}

func (a *app) outboxRetryCommand() *cobra.Command {
	var (
		allDead, dryRun, yes bool
		output               string
	)
	cmd := &cobra.Command{
		Use:   "retry [ID...]",
		Short: "Put dead outbox rows back to pending so the relay publishes them again",
		Long: `retry puts dead outbox rows (their publish attempts ran out) back to pending with
their attempts zeroed; the relay publishes them again. A dead row holds up its
ordering key until then. Name the rows by id, or pass --all-dead.`,
		Example: `  inboxctl outbox retry 019a2f0e-7b1c-7d3e-9f00-1a2b3c4d5e6f
  inboxctl outbox retry --all-dead --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if len(args) == 0 && !allDead {
				return usagef("name outbox ids, or pass --all-dead")
			}
			if len(args) > 0 && allDead {
				return usagef("give either ids or --all-dead, not both")
			}
			var ids []uuid.UUID
			for _, s := range args {
				id, err := uuid.Parse(s)
				if err != nil {
					return usagef("%q is not an outbox id: outbox ids are UUIDs", s)
				}
				ids = append(ids, id)
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			for _, id := range ids {
				d, err := a.admin.OutboxShow(ctx, id)
				if errors.Is(err, admin.ErrNotFound) {
					return fmt.Errorf("outbox row %s: %w; nothing was retried", id, err)
				}
				if err != nil {
					return err
				}
				if d.Status != pgbox.OutboxDead {
					return fmt.Errorf("outbox row %s is %s, not dead: only dead rows are retried; nothing was retried", id, d.Status)
				}
			}
			n := int64(len(ids))
			if allDead {
				dead := admin.OutboxListOptions{Filter: admin.OutboxFilter{Statuses: []pgbox.OutboxStatus{pgbox.OutboxDead}}}
				err := a.admin.OutboxList(ctx, dead, func(admin.OutboxMessage) error { n++; return nil })
				if err != nil {
					return err
				}
			}
			report := changeReport{Action: "retry outbox rows", DryRun: dryRun, Matched: n, Selection: outboxSelection{AllDead: allDead, IDs: ids}}
			switch {
			case n == 0:
				return a.printReport(output, report, "Nothing to retry: no dead outbox row.")
			case dryRun:
				return a.printReport(output, report, fmt.Sprintf("Would retry %s. Nothing was changed (--dry-run).", plural(n, "dead outbox row")))
			case allDead && !yes:
				if err := a.confirm(ctx, fmt.Sprintf("Retry %s in schema %s?", plural(n, "dead outbox row"), a.admin.Schema()), "retried"); err != nil {
					return err
				}
			}
			b := a.startBatches(ctx, "Retried", n)
			var err error
			report.Changed, err = a.admin.OutboxRetry(b.ctx, admin.OutboxRetryOptions{Actor: a.actor(), IDs: ids, ProgressFunc: b.report})
			a.endBatches(b)
			if b.interrupted() && err != nil {
				return a.interruptedChange(output, report, "retried", "dead outbox row",
					"rows already retried are pending, no longer dead, so --all-dead retries only the rest (drop ids already retried: they are refused)")
			}
			if err != nil {
				return fmt.Errorf("%w (retried %s before the error)", err, plural(report.Changed, "row"))
			}
			a.finishedDespite(b, "retried")
			return a.printReport(output, report, fmt.Sprintf("Retried %s: the relay will publish again.", plural(report.Changed, "outbox row")))
		},
	}
	cmd.Flags().BoolVar(&allDead, "all-dead", false, "retry every dead row")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be retried, and change nothing")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	outputFlag(cmd, &output, documentOutput)
	return cmd
}

// outboxSelection is outbox retry's selection in its JSON report.
type outboxSelection struct {
	// AllDead is --all-dead: every dead row.
	AllDead bool `json:"all_dead,omitzero"`
	// IDs are the rows named.
	IDs []uuid.UUID `json:"ids,omitzero"`
}
