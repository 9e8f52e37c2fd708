package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/pgbox/pgbox/relay"
)

// RelayChart is what the relay-scaling chart's file name adds to the
// throughput chart's, before ".png".
const RelayChart = "-relay"

// WriteChart draws the sweep, throughput against workers per system, as a
// PNG.
func (r *Report) WriteChart(w io.Writer) error {
	var lines []any
	for _, system := range []string{"pgbox", "river"} {
		var pts plotter.XYs
		for _, pt := range r.Sweep {
			if pt.System == system {
				pts = append(pts, plotter.XY{X: float64(pt.Workers), Y: pt.Throughput})
			}
		}
		if len(pts) > 0 {
			lines = append(lines, system, pts)
		}
	}
	return writeChart(w, "Draining a backlog: messages per second against workers", "workers (River: job workers ÷ 200)", true, lines)
}

// HasRelayChart reports whether r holds relay-scaling cases to chart.
func (r *Report) HasRelayChart() bool {
	return slices.ContainsFunc(r.Results, func(res Result) bool { return res.Scenario == "relay-scaling" })
}

// WriteRelayChart draws the relay-scaling cases, the median throughput
// against workers of one relay per broker, and that of two relays as a
// point at their workers in all, as a PNG.
func (r *Report) WriteRelayChart(w io.Writer) error {
	var lines []any
	for _, res := range r.Results {
		if res.Scenario != "relay-scaling" {
			continue
		}
		broker := res.Setting[strings.Index(res.Setting, "→ ")+len("→ "):]
		var one, two plotter.XYs
		for _, s := range res.Systems {
			y := s.Figures[res.Unit].Median
			if s.System == twoRelays {
				two = append(two, plotter.XY{X: float64(2 * relay.WorkersDefault), Y: y})
				continue
			}
			workers, err := strconv.Atoi(strings.Fields(s.System)[0])
			if err != nil {
				return fmt.Errorf("chart: relay-scaling system %q: no worker count", s.System)
			}
			one = append(one, plotter.XY{X: float64(workers), Y: y})
		}
		lines = append(lines, broker+", one relay", one)
		if len(two) > 0 {
			lines = append(lines, broker+", "+twoRelays, two)
		}
	}
	return writeChart(w, "The relay: messages published per second against workers", "workers (in all)", false, lines)
}

// writeChart draws lines (name, points, name, points...) of messages per
// second against x as a PNG, the legend top left, or else bottom right.
func writeChart(w io.Writer, title, x string, legendTopLeft bool, lines []any) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = "messages per second"
	p.Y.Min = 0
	p.Legend.Top, p.Legend.Left = legendTopLeft, legendTopLeft
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	wt, err := p.WriterTo(8*vg.Inch, 4.5*vg.Inch, "png")
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	_, err = wt.WriteTo(w)
	return err
}
