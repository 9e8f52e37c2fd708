package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// stats --check and processes --check end with ExitCheckFailed when they
// find something on-call must act on, for scripts and probes. Each
// problem is a line under "Check:" after the usual output, with the
// command that shows more, and in -o json the "check" object.

// The kinds of problem the checks report.
const (
	// checkDead: a consumer has dead messages (stats).
	checkDead = "dead"
	// checkFailing: a consumer has messages retrying after a failure
	// (stats).
	checkFailing = "failing"
	// checkStalled: a consumer's due message has waited past
	// --stall-after with no worker claiming it (stats).
	checkStalled = "stalled"
	// checkOutboxDead: the outbox has dead rows (stats).
	checkOutboxDead = "outbox_dead"
	// checkOutboxStalled: a due outbox row has waited past --stall-after
	// with no relay claiming it (stats).
	checkOutboxStalled = "outbox_stalled"
	// checkReplayStalled: an unfinished scheduled replay has been due for
	// longer than --stall-after, and no maintainer leads to run it
	// (stats).
	checkReplayStalled = "replay_stalled"
	// checkDeadProcessLeases: a dead process still holds messages under
	// lease (processes).
	checkDeadProcessLeases = "dead_process_leases"
	// checkNoLiveProcess: a dead dispatcher or relay has no live one of
	// its kind (and consumer) to take over its work (processes).
	checkNoLiveProcess = "no_live_process"
	// checkNoLeader: no maintainer leads the maintenance jobs (processes).
	checkNoLeader = "no_leader"
)

// problem is one thing a check found wrong.
type problem struct {
	// Consumer is the consumer it concerns; "" for the outbox, a relay or
	// maintenance.
	Consumer string `json:"consumer,omitempty"`
	// Count is how many messages, rows or processes it concerns.
	Count int64 `json:"count"`
	// Kind names the check that found it: dead, failing, stalled,
	// outbox_dead, outbox_stalled, replay_stalled, dead_process_leases,
	// no_live_process or no_leader.
	Kind string `json:"kind"`
	// Text says it for a person, with what to run; where is in front of
	// it in the table output.
	Text  string `json:"text"`
	where string
}

// checkReport is a check's result, as -o json adds it ("check").
type checkReport struct {
	// OK is true when the check found no problem.
	OK bool `json:"ok"`
	// Problems lists what it found, [] when nothing.
	Problems []problem `json:"problems"`
}

func newCheckReport(problems []problem) checkReport {
	if problems == nil {
		problems = []problem{}
	}
	return checkReport{OK: len(problems) == 0, Problems: problems}
}

// printCheck prints a check's result under the usual output: its
// problems, or ok saying what was checked.
func (a *app) printCheck(r checkReport, ok string) {
	if r.OK {
		fmt.Fprintf(a.out, "\nCheck: OK: %s.\n", ok)
		return
	}
	fmt.Fprintf(a.out, "\nCheck: %s.\n", plural(int64(len(r.Problems)), "problem"))
	for _, p := range r.Problems {
		fmt.Fprintf(a.out, "- %s: %s\n", p.where, p.Text)
	}
}

// checkErr is the error a failed check ends the run with.
func checkErr(r checkReport) error {
	if r.OK {
		return nil
	}
	return &exitError{ExitCheckFailed, fmt.Errorf("check failed: %s (listed above)", plural(int64(len(r.Problems)), "problem"))}
}

// statsProblems is what stats --check finds wrong: dead and failing
// messages, dead outbox rows, due work older than stallAfter, but for a
// consumer paused as a whole (pauses), whose work waits by design, and a
// scheduled replay due for longer than stallAfter while no maintainer
// leads (one that leads may take long on purpose: a throttled replay).
func (a *app) statsProblems(st *admin.Stats, o *admin.Overdue, stallAfter time.Duration, pauses []admin.Pause) []problem {
	var out []problem
	paused := map[string][]string{} // consumer: its event types paused, "" for all
	for _, p := range pauses {
		paused[p.Consumer] = append(paused[p.Consumer], p.EventType)
	}
	for _, c := range st.Consumers {
		failures := a.hint("failures", "--consumer", c.Consumer)
		if c.Dead > 0 {
			out = append(out, problem{Consumer: c.Consumer, Count: c.Dead, Kind: checkDead, where: clean(c.Consumer),
				Text: fmt.Sprintf("%s: '%s' groups them by cause.", plural(c.Dead, "dead message"), failures)})
		}
		if c.Retrying > 0 {
			next := ""
			if c.NextRetryAt != nil {
				next = ", the next " + due(*c.NextRetryAt, st.At)
			}
			out = append(out, problem{Consumer: c.Consumer, Count: c.Retrying, Kind: checkFailing, where: clean(c.Consumer),
				Text: fmt.Sprintf("%s failing, retrying after a failure%s: '%s' shows why.", plural(c.Retrying, "message"), next, failures)})
		}
		if waited, ok := o.Consumers[c.Consumer]; ok && time.Duration(waited) > stallAfter && !slices.Contains(paused[c.Consumer], "") {
			cause := "no dispatcher of " + clean(c.Consumer) + " running, all stuck, or its ordering key held up behind a failing message"
			if types := paused[c.Consumer]; len(types) > 0 {
				cause = fmt.Sprintf("%s %s paused ('%s' lists the pauses), ", verb(int64(len(types)), "event type", "event types"), cleanList(types),
					a.hint("pauses")) + cause
			}
			out = append(out, problem{Consumer: c.Consumer, Count: 1, Kind: checkStalled, where: clean(c.Consumer),
				Text: fmt.Sprintf("a message has waited %s since it was due, and no worker has claimed it (%s): '%s' shows who runs.",
					age(time.Duration(waited)), cause, a.hint("processes"))})
		}
	}
	if n := st.Outbox.Dead; n > 0 {
		out = append(out, problem{Count: n, Kind: checkOutboxDead, where: "outbox",
			Text: fmt.Sprintf("%s: '%s' shows %s.", plural(n, "dead row"), a.hint("outbox", "list", "--status", "dead"), verb(n, "it", "them"))})
	}
	if o.Outbox != nil && time.Duration(*o.Outbox) > stallAfter {
		out = append(out, problem{Count: 1, Kind: checkOutboxStalled, where: "outbox",
			Text: fmt.Sprintf("a row has waited %s since it was due, and no relay has claimed it (no relay running, all stuck, the broker "+
				"down, or its ordering key held up behind a dead row): '%s' shows who runs.", age(time.Duration(*o.Outbox)), a.hint("processes"))})
	}
	if o.Replay != nil && time.Duration(*o.Replay) > stallAfter && !o.MaintainerLeads {
		out = append(out, problem{Count: o.Replays, Kind: checkReplayStalled, where: "maintenance",
			Text: fmt.Sprintf("%s due and unfinished, the earliest due %s ago, and no maintainer leads to run them (a "+
				"maintenance.Maintainer in a service runs scheduled replays): '%s' shows who runs, '%s' lists them.",
				plural(o.Replays, "scheduled replay"), age(time.Duration(*o.Replay)), a.hint("processes"), a.hint("scheduled"))})
	}
	return out
}

// processProblems is what processes --check finds wrong: a dead process
// that still holds messages under lease, a dead dispatcher or relay with
// no live one to take over its work, and no maintenance leader. A dead
// process that left nothing behind (it was replaced) is history, pruned
// after a day, not a problem.
func processProblems(ps *admin.Processes) []problem {
	var out []problem
	for _, p := range ps.Processes {
		if p.State != admin.ProcessDead {
			continue
		}
		where, scope := "outbox", clean(string(p.Kind))
		if p.Consumer != "" {
			where = clean(p.Consumer)
			scope += " of " + clean(p.Consumer)
		}
		who := fmt.Sprintf("%s %s (host %s, pid %d)", clean(string(p.Kind)), clean(p.Name), clean(p.Host), p.PID)
		what := "message"
		if p.Kind == pgbox.ProcessRelay {
			what = "outbox row"
		}
		if n := p.Leases + p.ExpiredLeases; n > 0 {
			var parts []string
			if p.Leases > 0 {
				parts = append(parts, fmt.Sprintf("%s %s for %s to expire, by %s UTC", count(p.Leases), verb(p.Leases, "waits", "wait"),
					verb(p.Leases, "its lease", "their leases"), stamp(*p.LeasesEnd)))
			}
			if p.ExpiredLeases > 0 {
				parts = append(parts, fmt.Sprintf("%s %s, for a live %s to take over", count(p.ExpiredLeases),
					verb(p.ExpiredLeases, "has an expired lease", "have expired leases"), scope))
			}
			out = append(out, problem{Consumer: p.Consumer, Count: n, Kind: checkDeadProcessLeases, where: where,
				Text: fmt.Sprintf("%s is dead and holds %s under lease: %s.", who, plural(n, what), strings.Join(parts, "; "))})
		}
		if p.Kind != pgbox.ProcessMaintainer && !aliveLike(ps, p) {
			out = append(out, problem{Consumer: p.Consumer, Count: 1, Kind: checkNoLiveProcess, where: where,
				Text: fmt.Sprintf("%s is dead, and no live %s is running: its work waits. Start one.", who, scope)})
		}
	}
	if ps.Leader == nil {
		out = append(out, problem{Count: 0, Kind: checkNoLeader, where: "maintenance",
			Text: "no maintainer leads: retention and scheduled replays are not running. Start a maintenance.Maintainer in a service."})
	}
	return out
}
