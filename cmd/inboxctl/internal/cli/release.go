package cli

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

func (a *app) processesReleaseCommand() *cobra.Command {
	var (
		dryRun, force, yes bool
		output             string
	)
	cmd := &cobra.Command{
		Use:   "release PROCESS_ID",
		Short: "Make a dead process's leased messages claimable now, instead of when their leases end",
		Long: `release ends the leases a dead process's claims still hold: a dispatcher's leased
inbox messages, and the outbox rows a relay older than schema version 12 marked
running (a newer relay holds no lease: its rows are free the moment it dies).
A live dispatcher of the same consumer (a live relay) takes them over at its
next claim, as when a lease runs out:
the lost attempt is recorded and counts, and a message on its last attempt
ends dead. Use it once the process is known to be gone (its pod deleted, its
host lost), instead of waiting out the lease. PROCESS_ID is the id that
inboxctl processes -o json prints.

A process seen within its last ` + strconv.Itoa(pgbox.ProcessDeadAfter) + ` heartbeats is alive, and refused unless
--force: its handlers may still be running the messages, which are then
handled twice; what the handlers do outside the database (an email, a
charge) happens twice. Database writes stay single either way: the claim
token fences the old holder, whose late result matches no row.

It says how many messages it releases and asks for confirmation (--yes
skips it; --dry-run changes nothing), and is recorded in the audit log.`,
		Example: `  inboxctl processes release 42 --dry-run
  inboxctl processes release 42 --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usagef("%q is not a process id: use the id inboxctl processes -o json prints, a positive number", args[0])
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			ps, err := a.admin.Processes(ctx)
			if err != nil {
				return err
			}
			p, ok := findProcess(ps, id)
			if !ok {
				return fmt.Errorf("process %d: %w in schema %s: %s lists the registered processes (one that stopped cleanly deleted its row, and holds no leases); nothing was released",
					id, admin.ErrNotFound, a.admin.Schema(), a.hint("processes"))
			}
			alive := p.State != admin.ProcessDead
			if alive && !force {
				return fmt.Errorf("%s %s (id %d, host %s, pid %d) is alive: seen %s ago, within its last %d heartbeats; release only a process known to be gone, or add --force; nothing was released",
					p.Kind, clean(p.Name), p.ID, clean(p.Host), p.PID, age(time.Duration(p.SinceSeen)), ps.DeadAfter)
			}
			what, of, takeover := releaseWords(p)
			report := changeReport{Action: "release leases", DryRun: dryRun, Matched: p.Leases,
				Selection: releaseSelection{Force: force, Kind: p.Kind, Consumer: p.Consumer, Name: p.Name, ProcessID: p.ID, State: p.State}}
			held := plural(p.Leases, what) + of
			if p.Leases > 0 {
				held += fmt.Sprintf(" (%s by %s UTC)", verb(p.Leases, "its lease ends", "their leases end"), stamp(*p.LeasesEnd))
			}
			holder := fmt.Sprintf("%s %s %s (id %d, host %s, pid %d, last seen %s ago)", p.State, p.Kind, clean(p.Name), p.ID, clean(p.Host), p.PID,
				age(time.Duration(p.SinceSeen)))
			if alive {
				fmt.Fprintf(a.errOut, "Warning: %s is alive. Its handlers may still be running these messages: they will be handled again by another process, and what a handler does outside the database happens twice (the claim tokens keep database writes to one).\n", holder)
			}
			switch {
			case p.Leases == 0:
				return a.printReport(output, report, fmt.Sprintf("Nothing to release: %s holds no lease.%s", holder, expiredNote(p, what, of, takeover)))
			case dryRun:
				return a.printReport(output, report, fmt.Sprintf("Would release %s held by %s. Nothing was changed (--dry-run).", held, holder))
			case !yes:
				if err := a.confirm(ctx, fmt.Sprintf("Release %s held by %s in schema %s?", held, holder, a.admin.Schema()), "released"); err != nil {
					return err
				}
			}
			report.Changed, err = a.admin.ReleaseLeases(ctx, admin.ReleaseLeasesOptions{Actor: a.actor(), Force: force, ProcessID: id})
			if errors.Is(err, admin.ErrProcessAlive) {
				return fmt.Errorf("%w: it came back since it was read; add --force to release it anyway", err)
			}
			if err != nil {
				return err
			}
			text := fmt.Sprintf("Released %s%s: a live %s %s now, and counts the lost attempt.", plural(report.Changed, what), of, takeover,
				verb(report.Changed, "takes it over", "takes them over"))
			if !aliveLike(ps, p) {
				text += fmt.Sprintf("\nNo other live %s is running: start one, or they wait.", takeover)
			}
			return a.printReport(output, report, text+expiredNote(p, what, of, takeover))
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be released, and change nothing")
	cmd.Flags().BoolVar(&force, "force", false, "release the leases of a process that is alive too (its messages may be handled twice)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	outputFlag(cmd, &output, documentOutput)
	return cmd
}

// releaseSelection is processes release's selection in its JSON report.
type releaseSelection struct {
	// Consumer is a dispatcher's consumer.
	Consumer string `json:"consumer,omitzero"`
	// Force is --force.
	Force bool `json:"force,omitzero"`
	// Kind is the process's kind.
	Kind pgbox.ProcessKind `json:"kind"`
	// Name is its name.
	Name string `json:"name"`
	// ProcessID is its id.
	ProcessID int64 `json:"process_id"`
	// State is its state when it was read.
	State admin.ProcessState `json:"state"`
}

// findProcess returns the process with id.
func findProcess(ps *admin.Processes, id int64) (admin.Process, bool) {
	for _, p := range ps.Processes {
		if p.ID == id {
			return p, true
		}
	}
	return admin.Process{}, false
}

// releaseWords names what process p leases ("message", "outbox row"),
// whose (" of consumer payments", "") and who takes them over
// ("dispatcher of payments", "relay").
func releaseWords(p admin.Process) (what, of, takeover string) {
	if p.Kind == pgbox.ProcessRelay {
		return "outbox row", "", "relay"
	}
	return "message", " of consumer " + clean(p.Consumer), "dispatcher of " + clean(p.Consumer)
}

// expiredNote says what of p's claims have expired leases already, which
// need no release; "" if none.
func expiredNote(p admin.Process, what, of, takeover string) string {
	if p.ExpiredLeases == 0 {
		return ""
	}
	return fmt.Sprintf("\n%s%s already %s an expired lease: a live %s takes %s over without a release.", plural(p.ExpiredLeases, what), of,
		verb(p.ExpiredLeases, "has", "have"), takeover, verb(p.ExpiredLeases, "it", "them"))
}
