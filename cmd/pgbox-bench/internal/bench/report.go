package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Report is a whole bench run.
type Report struct {
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Runs     int       `json:"runs"`
	// Load is the machine's load average at the run's start and end
	// (LoadDuring): on a 2-core box, what else ran shows there.
	Load    string   `json:"load,omitempty"`
	Results []Result `json:"results"`
	Sweep   []Point  `json:"sweep,omitempty"`
	// Updates lists the later runs whose cases replaced this run's (Update).
	Updates []Update `json:"updates,omitempty"`
}

// Update records a later run of some cases that replaced their figures in
// a report: what ran, when, and which cases.
type Update struct {
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	// Load is the later run's Report.Load, or what was known of the load
	// for an update made before it was recorded.
	Load  string   `json:"load,omitempty"`
	Cases []string `json:"cases"`
	// Machine is the later run's machine, where it was not the report's.
	Machine *Machine `json:"machine,omitempty"`
	// Runs is the later run's timed runs per case, where they were not
	// the report's.
	Runs int `json:"runs,omitempty"`
}

// Update replaces r's results of the cases that newer measured (by
// scenario and setting; the systems of a case always run side by side, so
// a case is replaced whole), adds the cases r lacked, and records it. A
// case added goes after the case newer measured before it, if of the same
// scenario, or else after its scenario's last, so that a scenario's cases
// stay under one heading; a case of a scenario r lacked goes at the end.
// A newer sweep replaces the chart's points, all of them. Earlier updates
// no longer name the cases measured again, and go once they name none.
func (r *Report) Update(newer *Report) {
	u := Update{Command: newer.Command, Started: newer.Started, Load: newer.Load}
	if newer.Machine != r.Machine {
		u.Machine = &newer.Machine
	}
	if newer.Runs != r.Runs {
		u.Runs = newer.Runs
	}
	prev := -1 // where newer's last case went in r.Results
	for _, res := range newer.Results {
		u.Cases = append(u.Cases, res.Scenario+": "+res.Setting)
		i := slices.IndexFunc(r.Results, func(old Result) bool {
			return old.Scenario == res.Scenario && old.Setting == res.Setting
		})
		if i >= 0 {
			r.Results[i], prev = res, i
			continue
		}
		at := len(r.Results)
		if prev >= 0 && r.Results[prev].Scenario == res.Scenario {
			at = prev + 1
		} else {
			for j, old := range slices.Backward(r.Results) {
				if old.Scenario == res.Scenario {
					at = j + 1
					break
				}
			}
		}
		r.Results, prev = slices.Insert(r.Results, at, res), at
	}
	if len(newer.Sweep) > 0 {
		r.Sweep = newer.Sweep
		u.Cases = append(u.Cases, sweepCase)
	}
	updates := r.Updates[:0]
	for _, old := range r.Updates {
		old.Cases = slices.DeleteFunc(old.Cases, func(c string) bool { return slices.Contains(u.Cases, c) })
		if len(old.Cases) > 0 {
			updates = append(updates, old)
		}
	}
	r.Updates = append(updates, u)
}

// around returns s between before and after, or "" when s is "".
func around(before, s, after string) string {
	if s == "" {
		return ""
	}
	return before + s + after
}

// sweepCase is how an update names the chart's points.
const sweepCase = "sweep (the chart)"

// Result is one case: each system's figures and the first system's ratio
// to each of the others (its peers).
type Result struct {
	Scenario       string         `json:"scenario"`
	Setting        string         `json:"setting"`
	Unit           string         `json:"unit"`
	HigherIsBetter bool           `json:"higher_is_better"`
	Systems        []SystemResult `json:"systems"`
	Ratios         []Ratio        `json:"ratios,omitempty"`
}

// SystemResult is one system's runs of a case, by unit.
type SystemResult struct {
	System  string           `json:"system"`
	Figures map[string]Stats `json:"figures"`
}

// Stats summarizes the runs of one figure.
type Stats struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

// Ratio is the first system's main figure (pgbox's, where pgbox is in the
// case) divided by a peer's, run by run (the runs were taken side by side).
type Ratio struct {
	Peer   string  `json:"peer"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Point is one point of the worker-count chart.
type Point struct {
	System     string  `json:"system"`
	Workers    int     `json:"workers"`
	Throughput float64 `json:"msgs_per_s"`
}

func stats(v []float64) Stats {
	s := slices.Sorted(slices.Values(v))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stats{Median: med, Min: s[0], Max: s[len(s)-1], Runs: v}
}

func summarize(name string, runs []Figures) SystemResult {
	r := SystemResult{System: name, Figures: map[string]Stats{}}
	for unit := range runs[0] {
		var v []float64
		for _, f := range runs {
			v = append(v, f[unit])
		}
		r.Figures[unit] = stats(v)
	}
	return r
}

// ratios compares the case's first system with each of the others.
func ratios(c benchCase, runs map[string][]Figures) []Ratio {
	ours := runs[c.systems[0].name]
	if ours == nil {
		return nil
	}
	var out []Ratio
	for _, s := range c.systems[1:] {
		var v []float64
		for i, f := range runs[s.name] {
			if f[c.main] != 0 {
				v = append(v, ours[i][c.main]/f[c.main])
			}
		}
		if len(v) > 0 {
			st := stats(v)
			out = append(out, Ratio{Peer: s.name, Median: st.Median, Min: st.Min, Max: st.Max})
		}
	}
	return out
}

// WriteJSON writes the report for machines.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes the report for people: the command, the machine,
// and a table per scenario.
func (r *Report) WriteMarkdown(w io.Writer, chart string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\n")
	fmt.Fprintf(&b, "Generated by `%s` on %s (%s in all%s).\n\n", r.Command, r.Started.Format("2006-01-02 15:04 MST"),
		r.Finished.Sub(r.Started).Round(time.Second), around("; ", r.Load, ""))
	for _, u := range r.Updates {
		machine := "a machine as described below"
		if u.Machine != nil {
			machine = "another machine (" + u.Machine.String() + ")"
		}
		runs := ""
		if u.Runs != 0 {
			runs = fmt.Sprintf(", %d timed runs each", u.Runs)
		}
		fmt.Fprintf(&b, "Measured again by `%s` on %s%s, on %s with the data made the same way, "+
			"each case's systems side by side again%s, replacing those cases' earlier figures: %s.\n\n",
			u.Command, u.Started.Format("2006-01-02 15:04 MST"), around(" (", u.Load, ")"), machine, runs, strings.Join(u.Cases, "; "))
	}
	fmt.Fprintf(&b, "Machine: %s.\n\n", r.Machine)
	fmt.Fprintf(&b, "Each figure is the median of %d timed runs, with the minimum and maximum in brackets, taken after a warm-up "+
		"at a tenth of the size. The systems of a case run side by side, in alternating order; **ratio** is the first "+
		"system's figure (pgbox's, where pgbox is in the case) divided by the peer's, run by run (median, with min–max), "+
		"so a noisy machine touches both sides alike.\n\n", r.Runs)
	r.writeTargets(&b)
	scenario, unit := "", ""
	for _, res := range r.Results {
		if res.Scenario != scenario {
			scenario, unit = res.Scenario, ""
			fmt.Fprintf(&b, "\n## %s\n\n%s\n", scenario, describe[scenario])
			if scenario == "relay-scaling" && chart != "" {
				fmt.Fprintf(&b, "\n![relay throughput against workers](%s)\n", strings.TrimSuffix(chart, ".png")+RelayChart+".png")
			}
		}
		// A scenario may measure in more than one unit (pooler: msgs/s,
		// then latencies): each unit gets a table of its own.
		if res.Unit != unit {
			unit = res.Unit
			fmt.Fprintf(&b, "\n| setting | system | %s | other figures | ratio |\n|---|---|---|---|---|\n", unit)
		}
		for i, s := range res.Systems {
			main := s.Figures[res.Unit]
			var other []string
			for _, unit := range slices.Sorted(maps.Keys(s.Figures)) {
				if unit != res.Unit {
					other = append(other, fmt.Sprintf("%s %s", format(s.Figures[unit].Median), unit))
				}
			}
			ratio := ""
			if i == 0 {
				for _, q := range res.Ratios {
					ratio += fmt.Sprintf("%.2f× %s (%.2f–%.2f) ", q.Median, q.Peer, q.Min, q.Max)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s (%s–%s) | %s | %s |\n", res.Setting, s.System,
				format(main.Median), format(main.Min), format(main.Max), strings.Join(other, ", "), strings.TrimSpace(ratio))
		}
	}
	if chart != "" && len(r.Sweep) > 0 {
		fmt.Fprintf(&b, "\n## Throughput against workers\n\n%s\n\n![drain throughput against workers](%s)\n\n| system | workers | msgs/s |\n|---|---|---|\n",
			describe["sweep"], chart)
		for _, p := range r.Sweep {
			fmt.Fprintf(&b, "| %s | %d | %s |\n", p.System, p.Workers, format(p.Throughput))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func format(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
