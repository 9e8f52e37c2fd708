package cli

import (
	"cmp"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox/admin"
)

// actor is who runs this inboxctl, for the audit log: --as, or the OS
// user; this host and this process.
func (a *app) actor() admin.Actor {
	name := a.as
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, _ := os.Hostname()
	return admin.Actor{Host: host, Name: cmp.Or(name, a.getenv("USER"), "unknown"), PID: os.Getpid()}
}

func (a *app) auditCommand() *cobra.Command {
	var (
		action, output, since string
		limit                 int
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List operators' actions, newest first: who replayed, discarded, purged what",
		Long: `audit lists what operators did, newest first: every replay, discard, purge,
scheduled replay (and its cancel), outbox retry and payload edit, whether made
with inboxctl or through the admin package. Each record says who (the OS user,
or --as), from where (host and process id), when, the selection, the note, how
many rows it changed, and how it ended: finished, interrupted (with the count
it reached), or cancelled. A dry run is not recorded.

The count is written by each batch in the statement that makes the change, so
it is what committed even if inboxctl was killed: a record still "running"
long after it began belongs to a process that died.`,
		Example: `  inboxctl audit
  inboxctl audit --since 24h --action replay
  inboxctl audit --limit 500 -o jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			from, err := parseWhen("--since", since, a.now())
			if err != nil {
				return err
			}
			if limit < 1 {
				return usagef("--limit %d: use 1 or more", limit)
			}
			if action != "" && !slices.Contains(auditActionNames(), action) {
				return usagef("--action %q: use one of %s", action, strings.Join(auditActionNames(), ", "))
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			records, err := a.admin.AuditLog(ctx, admin.AuditLogOptions{Action: admin.AuditAction(action), Limit: limit, Since: from})
			if err != nil {
				return err
			}
			switch output {
			case formatJSON:
				if records == nil {
					records = []admin.AuditRecord{}
				}
				return writeJSON(a.out, records)
			case formatJSONL:
				for _, r := range records {
					if err := writeJSONLine(a.out, r); err != nil {
						return err
					}
				}
				return nil
			}
			if len(records) == 0 {
				fmt.Fprintln(a.out, "No audit records match.")
				return nil
			}
			t := newTable(a.out)
			fmt.Fprintln(t, "ID\tAT (UTC)\tWHO\tFROM\tACTION\tSTATE\tAFFECTED\tSELECTION\tNOTE")
			for _, r := range records {
				state := string(r.State)
				if r.Error != "" {
					state += ": " + cell(r.Error, 40)
				}
				from := clean(r.Actor.Host)
				if r.Actor.PID != 0 {
					from += fmt.Sprintf(" pid %d", r.Actor.PID)
				}
				fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, stamp(r.At), clean(r.Actor.Name), from, clean(string(r.Action)),
					clean(state), count(r.Affected), cell(string(r.Selection), 60), cell(r.Note, 40))
			}
			if err := t.Flush(); err != nil {
				return err
			}
			if len(records) == limit {
				fmt.Fprintf(a.out, "\nShowing the newest %d; raise --limit or narrow with --since or --action to see more.\n", limit)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "only actions begun since: a duration ago (90m, 2h, 7d) or a time (2026-11-22T06:00:00Z)")
	cmd.Flags().StringVar(&action, "action", "", "only this action: "+strings.Join(auditActionNames(), ", "))
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many records")
	outputFlag(cmd, &output, listOutput)
	return cmd
}

// auditActionNames lists the actions --action takes.
func auditActionNames() []string {
	var names []string
	for _, a := range admin.AuditActions() {
		names = append(names, string(a))
	}
	return names
}
