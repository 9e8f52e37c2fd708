package bench

import (
	"fmt"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WriteChart draws the sweep, throughput against workers per system, as a
// PNG.
func (r *Report) WriteChart(w io.Writer) error {
	p := plot.New()
	p.Title.Text = "Draining a backlog: messages per second against workers"
	p.X.Label.Text = "workers (River: job workers ÷ 200)"
	p.Y.Label.Text = "messages per second"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
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
