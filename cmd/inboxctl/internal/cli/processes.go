package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

func (a *app) processesCommand() *cobra.Command {
	var (
		check  bool
		output string
	)
	cmd := &cobra.Command{
		Use:     "processes",
		Aliases: []string{"ps"},
		Short:   "Show which dispatchers, relays and maintainers are alive, and the maintenance leader",
		Long: `processes lists the dispatchers, relays and maintainers running on the schema:
each registers when it starts, records a heartbeat while it runs (every 10s
by default) and deletes its row when it stops cleanly. One not seen for more
than ` + strconv.Itoa(pgbox.ProcessDeadAfter) + ` heartbeats is dead: it was killed, lost its database, or hangs.

STATE is alive, dead, or leader: the maintainer that runs the maintenance
jobs (retention, scheduled replays). LEASES counts the messages a process
claimed under a lease that still holds them: a dead dispatcher's messages
wait until their leases end, then a live dispatcher of the same consumer
retries them. A footer says what each dead process left behind.

-o json prints one object: the time it was read (at), the heartbeats a
process may miss (dead_after_heartbeats), the leader, and the processes;
-o jsonl prints the processes, one a line.

--check is for scripts and probes: after the usual output it lists what
on-call must act on, and exits ` + strconv.Itoa(ExitCheckFailed) + ` if anything: a dead process that still
holds messages under lease, a dead dispatcher or relay with no live one of
its kind (and consumer) to take over, and no maintenance leader. A dead
process that left nothing behind (it was replaced) is no problem. -o json
adds "check": {"ok", "problems": [{"kind", "consumer", "count", "text"}]}.`,
		Example: `  inboxctl processes
  inboxctl ps -o json | jq '.processes[] | select(.state == "dead")'
  inboxctl ps -o jsonl | jq -c 'select(.state == "dead")'
  inboxctl processes --check`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			ps, err := a.admin.Processes(ctx)
			if err != nil {
				return err
			}
			report := checkReport{OK: true} // no check asked for, none failed
			if check {
				report = newCheckReport(processProblems(ps))
			}
			switch {
			case output == formatJSON && check:
				err = writeJSON(a.out, checkedProcesses{Processes: ps, Check: report})
			case output == formatJSON:
				err = writeJSON(a.out, ps)
			case output == formatJSONL:
				for _, p := range ps.Processes {
					if err = writeJSONLine(a.out, p); err != nil {
						break
					}
				}
			default:
				err = a.printProcesses(ps)
				if check && err == nil {
					a.printCheck(report, "no dead process holds leases or leaves work with no live process to do it, and a maintainer leads")
				}
			}
			if err != nil {
				return err
			}
			return checkErr(report)
		},
	}
	outputFlag(cmd, &output, snapshotOutput)
	cmd.AddCommand(a.processesReleaseCommand())
	cmd.Flags().BoolVar(&check, "check", false, "exit "+strconv.Itoa(ExitCheckFailed)+" if on-call must act: a dead process's leases or work left with no live process, no maintenance leader (for scripts and probes)")
	return cmd
}

// checkedProcesses is processes --check -o json: the processes, and the
// check.
type checkedProcesses struct {
	*admin.Processes
	Check checkReport `json:"check"`
}

func (a *app) printProcesses(ps *admin.Processes) error {
	fmt.Fprintf(a.out, "pgbox schema %q at %s UTC\n", a.admin.Schema(), stamp(ps.At))
	fmt.Fprintln(a.out, describeLeader(ps))
	if len(ps.Processes) == 0 {
		fmt.Fprintln(a.out, "\nNo process is registered. Dispatchers, relays and maintainers register when they start, and delete their row when they stop.")
		return nil
	}
	fmt.Fprintln(a.out)
	t := newTable(a.out)
	fmt.Fprintln(t, "ID\tKIND\tNAME\tCONSUMER\tHOST\tPID\tSTARTED (UTC)\tLAST SEEN\tSTATE\tLEASES")
	for _, p := range ps.Processes {
		fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s ago\t%s\t%s\n", p.ID, clean(string(p.Kind)), cell(p.Name, 40), orDash(clean(p.Consumer)), cell(p.Host, 30),
			p.PID, stamp(p.StartedAt), age(time.Duration(p.SinceSeen)), p.State, leases(p))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	a.printDead(ps)
	return nil
}

// describeLeader says who runs the maintenance jobs, or that nobody does.
func describeLeader(ps *admin.Processes) string {
	l := ps.Leader
	if l == nil {
		return "Maintenance leader: none. No maintainer is alive, so retention and scheduled replays are not running: start a maintenance.Maintainer in a service."
	}
	for _, p := range ps.Processes {
		if p.ID == l.ProcessID {
			return fmt.Sprintf("Maintenance leader: %s (host %s, pid %d), since %s UTC.", clean(p.Name), clean(p.Host), p.PID, stamp(l.ElectedAt))
		}
	}
	return fmt.Sprintf("Maintenance leader: River client %s, since %s UTC (not in the processes table: a pgbox build older than schema version 6?).",
		clean(l.RiverID), stamp(l.ElectedAt))
}

// leases fills the LEASES cell: messages held, and those whose lease has
// ended without a rescue yet.
func leases(p admin.Process) string {
	if p.Kind == pgbox.ProcessMaintainer {
		return "-"
	}
	s := count(p.Leases)
	if p.ExpiredLeases > 0 {
		s += ", " + count(p.ExpiredLeases) + " expired"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printDead writes the footer: what each dead process left behind, and
// what to do about it.
func (a *app) printDead(ps *admin.Processes) {
	w := a.out
	var dead []admin.Process
	for _, p := range ps.Processes {
		if p.State == admin.ProcessDead {
			dead = append(dead, p)
		}
	}
	if len(dead) == 0 {
		return
	}
	word := "dead process"
	if len(dead) > 1 {
		word += "es"
	}
	fmt.Fprintf(w, "\n%d %s (not seen for more than %d heartbeats: killed, cut off from the database, or hung):\n",
		len(dead), word, ps.DeadAfter)
	for _, p := range dead {
		scope := clean(string(p.Kind))
		if p.Consumer != "" {
			scope += " of " + clean(p.Consumer)
		}
		fmt.Fprintf(w, "- %s %s, host %s pid %d, last seen %s ago.\n", clean(string(p.Kind)), clean(p.Name), clean(p.Host), p.PID,
			age(time.Duration(p.SinceSeen)))
		what, retries, takeover := "message", "retries %s (the lost attempt counts)", "retries %s, one at a time per dispatcher"
		if p.Kind == pgbox.ProcessRelay {
			what, retries = "outbox row", "publishes %s again (consumers dedupe on the message id)"
			takeover = retries
		}
		if n := p.Leases; n > 0 {
			fmt.Fprintf(w, "  %s %s for %s to expire, by %s UTC; then a live %s %s.\n", plural(n, what), verb(n, "waits", "wait"),
				verb(n, "its lease", "their leases"), stamp(*p.LeasesEnd), scope, fmt.Sprintf(retries, verb(n, "it", "them")))
			fmt.Fprintf(w, "  Gone for good? '%s' makes %s claimable now.\n", a.hint("processes", "release", strconv.FormatInt(p.ID, 10)),
				verb(n, "it", "them"))
		}
		if n := p.ExpiredLeases; n > 0 {
			fmt.Fprintf(w, "  %s %s: a live %s %s.\n", plural(n, what), verb(n, "has an expired lease", "have expired leases"),
				scope, fmt.Sprintf(takeover, verb(n, "it", "them")))
		}
		if p.Kind != pgbox.ProcessMaintainer && !aliveLike(ps, p) {
			fmt.Fprintf(w, "  No live %s is running: start one, or its work waits.\n", scope)
		}
	}
	fmt.Fprintln(w, "If a process was not stopped on purpose, its logs on its host say why.")
	fmt.Fprintln(w, "A clean Stop removes a process's row; a dead one's is pruned once not seen for a day (maintenance.Config.ProcessRetention).")
}

// verb picks the singular or plural form for n things.
func verb(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// aliveLike reports whether another live process can take over gone's
// work: one of the same kind and, for dispatchers, consumer.
func aliveLike(ps *admin.Processes, gone admin.Process) bool {
	for _, p := range ps.Processes {
		if p.ID != gone.ID && p.State != admin.ProcessDead && p.Kind == gone.Kind && p.Consumer == gone.Consumer {
			return true
		}
	}
	return false
}
