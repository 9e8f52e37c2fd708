package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A scenario that measures in two units (pooler: throughput, then
// latency) gets a table per unit, so that no figure sits under another
// unit's heading.
func TestMarkdownHeadsEachUnitsTable(t *testing.T) {
	t.Parallel()
	result := func(setting, unit string, v float64) Result {
		return Result{Scenario: "pooler", Setting: setting, Unit: unit, Systems: []SystemResult{
			{System: "PgBouncer", Figures: map[string]Stats{unit: stats([]float64{v})}},
		}}
	}
	rep := &Report{Results: []Result{
		result("Receive, 16 conns", "msgs/s", 1000),
		result("drain 200000 messages", "msgs/s", 20000),
		result("latency, inbox, 50/s, poll-only", "p99 ms", 950),
	}}
	var b strings.Builder
	require.NoError(t, rep.WriteMarkdown(&b, ""))
	md := b.String()
	require.Equal(t, 1, strings.Count(md, "\n## pooler\n"), md)
	throughput := strings.Index(md, "| setting | system | msgs/s |")
	latency := strings.Index(md, "| setting | system | p99 ms |")
	require.Positive(t, throughput, md)
	require.Greater(t, latency, strings.Index(md, "| drain 200000 messages |"), "the latency table follows the throughput rows")
	require.Less(t, latency, strings.Index(md, "| latency, inbox, 50/s, poll-only |"), md)
}

// The console's target is judged on its slowest page, and names it: a
// fast first page must not hide a slow one.
func TestSlowestTargetJudgesTheSlowestCase(t *testing.T) {
	t.Parallel()
	page := func(setting string, ms float64) Result {
		return Result{Scenario: "operator", Setting: setting, Unit: "ms", Systems: []SystemResult{
			{System: "pgbox", Figures: map[string]Stats{"ms": stats([]float64{ms})}},
		}}
	}
	goal := slowestTarget("pages under 200 ms", "operator", "console:", "ms", 200)
	rep := &Report{Results: []Result{
		page("stats, 50M done", 900), // not a console page
		page("console: overview (GET /)", 12),
		page("console: failures (GET /failures)", 250),
		page("console: audit (GET /audit)", 30),
	}}
	figure, met, ok := goal.check(rep)
	require.True(t, ok)
	require.False(t, met, figure)
	require.Contains(t, figure, "failures", "the figure names the slowest page")

	rep.Results[2] = page("console: failures (GET /failures)", 150)
	figure, met, ok = goal.check(rep)
	require.True(t, ok)
	require.True(t, met, figure)

	_, _, ok = goal.check(&Report{})
	require.False(t, ok, "a report without console cases does not judge the target")
}

// A case an update adds stays under its scenario's heading: after the
// case measured before it, or its scenario's last; a scenario the report
// lacked goes at the end.
func TestUpdateKeepsAScenarioTogether(t *testing.T) {
	t.Parallel()
	result := func(scenario, setting string) Result { return Result{Scenario: scenario, Setting: setting} }
	rep := &Report{Results: []Result{result("relay", "GoChannel"), result("relay", "Kafka"), result("relay", "SQS"), result("latency", "1000/s")}}
	rep.Update(&Report{Results: []Result{
		result("relay", "Kafka"), result("relay", "Kafka, Sarama"), result("latency", "500/s"), result("memory", "drain"),
	}})
	require.Equal(t, []Result{
		result("relay", "GoChannel"), result("relay", "Kafka"), result("relay", "Kafka, Sarama"), result("relay", "SQS"),
		result("latency", "1000/s"), result("latency", "500/s"), result("memory", "drain"),
	}, rep.Results)
}

// An update replaces the cases it measured, whole, keeps the others, adds
// what the report lacked, and the report says what was measured again.
func TestUpdateReplacesOnlyWhatItMeasured(t *testing.T) {
	t.Parallel()
	result := func(scenario, setting string, v float64) Result {
		return Result{Scenario: scenario, Setting: setting, Unit: "ms", Systems: []SystemResult{
			{System: "pgbox", Figures: map[string]Stats{"ms": stats([]float64{v})}},
		}}
	}
	rep := &Report{Command: "make bench", Results: []Result{
		result("operator", "stats, 50M done", 1700), result("operator", "failures, 50M done", 90),
	}}
	rep.Update(&Report{Command: "make bench -only operator/stats -update", Load: LoadDuring("0.52", "1.90"), Results: []Result{
		result("operator", "stats, 50M done", 40), result("operator", "stats --exact, 50M done", 9000),
	}})
	require.Equal(t, []Result{
		result("operator", "stats, 50M done", 40), result("operator", "stats --exact, 50M done", 9000),
		result("operator", "failures, 50M done", 90),
	}, rep.Results, "a case added follows the one measured before it")
	var b strings.Builder
	require.NoError(t, rep.WriteMarkdown(&b, ""))
	require.Contains(t, b.String(), "Measured again by `make bench -only operator/stats -update` on 0001-01-01 00:00 UTC (load average 0.52 at the start, 1.90 at the end),",
		"an update says what else ran")
	require.Contains(t, b.String(), "operator: stats, 50M done; operator: stats --exact, 50M done")
	require.Contains(t, b.String(), ", on a machine as described below with the data made the same way", "the same machine")

	// An update measured elsewhere names its machine.
	rep.Machine = Machine{CPU: "AMD EPYC", Cores: 2}
	other := Machine{CPU: "Intel Xeon", Cores: 2}
	rep.Update(&Report{Command: "make bench -only operator/failures -update", Machine: other, Runs: 7, Results: []Result{result("operator", "failures, 50M done", 85)}})
	require.Equal(t, &other, rep.Updates[len(rep.Updates)-1].Machine)
	b.Reset()
	require.NoError(t, rep.WriteMarkdown(&b, ""))
	require.Contains(t, b.String(), "Measured again by `make bench -only operator/failures -update` on 0001-01-01 00:00 UTC, on another machine (Intel Xeon, 2 cores,")
	require.Contains(t, b.String(), "each case's systems side by side again, 7 timed runs each, replacing", "an update of other runs says how many")
	require.Contains(t, b.String(), "Machine: AMD EPYC, 2 cores,", "the report's own machine stays")
	rep.Machine = Machine{}
	rep.Updates = rep.Updates[:len(rep.Updates)-1]

	rep.Sweep = []Point{{System: "pgbox", Workers: 1, Throughput: 10}}
	rep.Update(&Report{Command: "make bench -only operator/failures -update", Results: []Result{result("operator", "failures, 50M done", 80)}})
	require.Equal(t, []Point{{System: "pgbox", Workers: 1, Throughput: 10}}, rep.Sweep, "an update without a sweep keeps the chart")
	newer := []Point{{System: "pgbox", Workers: 1, Throughput: 20}, {System: "river", Workers: 1, Throughput: 9}}
	rep.Update(&Report{Command: "make bench -only sweep -update", Sweep: newer})
	require.Equal(t, newer, rep.Sweep, "a sweep replaces the chart")
	require.Equal(t, []string{"sweep (the chart)"}, rep.Updates[len(rep.Updates)-1].Cases)

	// Measured again, a case leaves the earlier notes; a note left naming
	// nothing goes.
	rep.Update(&Report{Command: "make bench -only operator -update", Results: []Result{
		result("operator", "stats, 50M done", 41), result("operator", "failures, 50M done", 81),
	}})
	var commands []string
	for i, u := range rep.Updates {
		commands = append(commands, u.Command)
		if i < len(rep.Updates)-1 {
			require.NotContains(t, u.Cases, "operator: stats, 50M done", "only the newest note names it")
		}
	}
	require.Equal(t, []string{"make bench -only operator/stats -update", "make bench -only sweep -update", "make bench -only operator -update"}, commands,
		"the note of operator/failures alone went")
	require.Equal(t, []string{"operator: stats --exact, 50M done"}, rep.Updates[0].Cases)
}
