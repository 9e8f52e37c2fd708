package bench

import (
	"fmt"
	"strings"
)

// target is one of the project's performance goals, judged from a report.
type target struct {
	goal string
	// check returns the measured figure, as text, and whether it meets the
	// goal; ok is false with an empty figure when the report lacks the case.
	check func(r *Report) (figure string, met, ok bool)
}

// ratioTarget is met when pgbox's median ratio to peer in the case of
// scenario whose setting starts with setting is at least min.
func ratioTarget(goal, scenario, setting, peer string, min float64) target {
	return ratioTargetOf(goal, scenario, func(s string) bool { return strings.HasPrefix(s, setting) }, peer, min)
}

// ratioTargetOf is ratioTarget for the first case of scenario whose
// setting matches.
func ratioTargetOf(goal, scenario string, matches func(setting string) bool, peer string, min float64) target {
	return target{goal: goal, check: func(r *Report) (string, bool, bool) {
		for _, res := range r.Results {
			if res.Scenario != scenario || !matches(res.Setting) {
				continue
			}
			for _, q := range res.Ratios {
				if q.Peer == peer {
					return fmt.Sprintf("%.2f× (runs %.2f–%.2f)", q.Median, q.Min, q.Max), q.Median >= min, true
				}
			}
		}
		return "", false, false
	}}
}

// lowestRatioTarget is met when the lowest of pgbox's median ratios to
// peer, over the cases of scenario whose setting keep keeps, is at least
// min; the figure names that case.
func lowestRatioTarget(goal, scenario, peer string, keep func(setting string) bool, min float64) target {
	return target{goal: goal, check: func(r *Report) (string, bool, bool) {
		var (
			worst Ratio
			name  string
		)
		for _, res := range r.Results {
			if res.Scenario != scenario || !keep(res.Setting) {
				continue
			}
			for _, q := range res.Ratios {
				if q.Peer == peer && (name == "" || q.Median < worst.Median) {
					worst, name = q, res.Setting
				}
			}
		}
		if name == "" {
			return "", false, false
		}
		return fmt.Sprintf("%.2f× at least (%s; runs %.2f–%.2f)", worst.Median, name, worst.Min, worst.Max), worst.Median >= min, true
	}}
}

// figureTarget is met when pgbox's median figure unit in the case is at
// most max.
func figureTarget(goal, scenario, setting, unit string, max float64) target {
	return target{goal: goal, check: func(r *Report) (string, bool, bool) {
		st, ok := pgboxFigure(r, scenario, setting, unit)
		if !ok {
			return "", false, false
		}
		return fmt.Sprintf("%s %s (runs %s–%s)", format(st.Median), unit, format(st.Min), format(st.Max)), st.Median <= max, true
	}}
}

// slowestTarget is met when the highest of pgbox's median figures unit
// over every case of scenario whose setting starts with setting is at most
// max; the figure names that case.
func slowestTarget(goal, scenario, setting, unit string, max float64) target {
	return target{goal: goal, check: func(r *Report) (string, bool, bool) {
		var worst Stats
		var name string
		for _, res := range r.Results {
			if res.Scenario != scenario || !strings.HasPrefix(res.Setting, setting) {
				continue
			}
			if st, ok := resultFigure(res, unit); ok && (name == "" || st.Median > worst.Median) {
				worst, name = st, res.Setting
			}
		}
		if name == "" {
			return "", false, false
		}
		return fmt.Sprintf("%s %s at most (%s; runs %s–%s)", format(worst.Median), unit, name, format(worst.Min), format(worst.Max)),
			worst.Median <= max, true
	}}
}

// latencyTarget is met when pgbox's median p99 in the latency case is at
// most max, and its senders held at least 95% of rate in every run: a run
// that fell behind timed a lighter load than its setting says.
func latencyTarget(goal, setting string, rate int, max float64) target {
	p99 := figureTarget(goal, "latency", setting, "p99 ms", max)
	return target{goal: goal, check: func(r *Report) (string, bool, bool) {
		figure, met, ok := p99.check(r)
		if held, found := pgboxFigure(r, "latency", setting, "sent/s"); ok && found && held.Min < 0.95*float64(rate) {
			return fmt.Sprintf("%s, but its senders held only %.1f of %d messages a second", figure, held.Min, rate), false, true
		}
		return figure, met, ok
	}}
}

// pgboxFigure returns pgbox's figure unit in the case of scenario whose
// setting starts with setting (see resultFigure).
func pgboxFigure(r *Report, scenario, setting, unit string) (Stats, bool) {
	for _, res := range r.Results {
		if res.Scenario != scenario || !strings.HasPrefix(res.Setting, setting) {
			continue
		}
		if st, ok := resultFigure(res, unit); ok {
			return st, true
		}
	}
	return Stats{}, false
}

// resultFigure returns pgbox's figure unit in one case: the system named
// pgbox, or else the case's first system (the retained scenario's largest
// inbox).
func resultFigure(res Result, unit string) (Stats, bool) {
	for _, s := range res.Systems {
		if st, ok := s.Figures[unit]; ok && s.System == "pgbox" {
			return st, true
		}
	}
	if len(res.Systems) > 0 && res.Systems[0].System != "pgbox" {
		st, ok := res.Systems[0].Figures[unit]
		return st, ok
	}
	return Stats{}, false
}

// targets are the goals the project set itself for pgbox on its 2-core
// development machine.
var targets = []target{
	ratioTarget("dispatch, drain: at least 1.5× River", "dispatch-drain", "", "river", 1.5),
	ratioTarget("dispatch, continuous: at least 1.5× River", "dispatch-continuous", "", "river", 1.5),
	ratioTarget("ReceiveBatch 100: at least 70% of the plain batched INSERT", "ingest", "ReceiveBatch 100", "raw", 0.7),
	ratioTarget("ReceiveBatch 1000: at least 70% of the plain batched INSERT", "ingest", "ReceiveBatch 1000", "raw", 0.7),
	ratioTarget("Receive at 16 connections: at least 90% of the plain single-row INSERT", "ingest", "Receive, 16", "raw", 0.9),
	lowestRatioTarget("relay to GoChannel: at least 0.8× the plain SQL loop (raw)", "relay", "raw",
		func(setting string) bool { return strings.HasSuffix(setting, "→ GoChannel") }, 0.8),
	lowestRatioTarget("relay to each broker, through the publisher pgbox recommends for it: at least 0.8× the broker's own client (raw)", "relay", "raw",
		func(setting string) bool {
			return !strings.HasSuffix(setting, "→ GoChannel") && !otherWiring(setting)
		}, 0.8),
	figureTarget("duplicate storm: at most one round trip per 10 redeliveries", "duplicate-storm", "", "round trips/redelivery", 0.1),
	latencyTarget("latency through the inbox: p99 under 25 ms", "inbox, 1000/s", 1000, 25),
	latencyTarget("latency through outbox, relay and inbox: p99 under 25 ms", "outbox → relay → inbox, 1000/s", 1000, 25),
	figureTarget("memory flat across the drain: within 10%", "memory", "", "RSS spread %", 10),
	ratioTarget("ReceiveBatch with the largest retained inbox (UUIDv7 ids): at least 85% of an empty inbox",
		"retained", "ReceiveBatch 100 from 4 conns, UUIDv7", "none kept", 0.85),
	ratioTarget("drain with the largest retained inbox (UUIDv7 ids): at least 85% of an empty inbox",
		"retained", "drain", "none kept", 0.85),
	ratioTargetOf("ReceiveBatch with the largest retained inbox of random ids with a stable time: at least 85% of an empty inbox",
		"retained", func(s string) bool {
			return strings.HasPrefix(s, "ReceiveBatch") && strings.HasSuffix(s, datedIDs.String())
		}, "none kept", 0.85),
	ratioTargetOf("drain with the largest retained inbox of random ids with a stable time: at least 85% of an empty inbox",
		"retained", func(s string) bool { return strings.HasPrefix(s, "drain") && strings.HasSuffix(s, datedIDs.String()) }, "none kept", 0.85),
	figureTarget("expiring a day of the largest retained inbox: under a second", "retained", "drop an expired day", "ms", 1000),
	figureTarget("stats on the operator's inbox: under 100 ms", "operator", "stats,", "ms", 100),
	figureTarget("failures on the operator's inbox: under 100 ms", "operator", "failures,", "ms", 100),
	figureTarget("list --group on the operator's inbox: under 100 ms", "operator", "list --group,", "ms", 100),
	slowestTarget("every console page on the operator's inbox: under 200 ms", "operator", "console:", "ms", 200),
}

// writeTargets writes the goals with what this run measured.
func (r *Report) writeTargets(b *strings.Builder) {
	fmt.Fprintf(b, "## Targets\n\n| goal | measured (median) | |\n|---|---|---|\n")
	for _, t := range targets {
		figure, met, ok := t.check(r)
		verdict := "not met"
		switch {
		case !ok:
			figure, verdict = "not measured in this run", ""
		case met:
			verdict = "met"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", t.goal, figure, verdict)
	}
	b.WriteString("\n")
}

// otherWirings are the relay cases through a broker's other publisher
// than the one pgbox recommends for it, measured beside it: the goals
// read the recommended one.
var otherWirings = []string{"watermill-sql", "watermill-sql, AtomicPublisher", "Kafka (kfake, in process), Sarama"}

// otherWiring reports whether a relay case's setting is one of
// otherWirings.
func otherWiring(setting string) bool {
	for _, w := range otherWirings {
		if strings.HasSuffix(setting, "→ "+w) {
			return true
		}
	}
	return false
}
