package console

// sparkHeight, sparkBarWidth and sparkGap size a spark chart, in pixels.
const (
	sparkHeight   = 24
	sparkBarWidth = 3
	sparkGap      = 1
)

// sparkView is a small bar chart, as the "spark" template draws it in SVG:
// numbers, and a title the template escapes like any text.
type sparkView struct {
	// Axis is the baseline's y.
	Axis int
	// BarWidth is each bar's width.
	BarWidth int
	// Bars are the buckets that counted something, oldest first.
	Bars []sparkBar
	// Height and Width are the chart's size.
	Height, Width int
	// Title is the tooltip and the chart's accessible name.
	Title string
}

// sparkBar is one bar of a spark chart: where it stands, and how tall.
type sparkBar struct{ X, Y, Height int }

// spark lays out counts (one per bucket, oldest first) as a sparkView,
// each bar scaled to the busiest bucket, titled title.
func spark(counts []int64, title string) sparkView {
	v := sparkView{Axis: sparkHeight - 1, BarWidth: sparkBarWidth, Height: sparkHeight,
		Width: max(len(counts)*(sparkBarWidth+sparkGap)-sparkGap, 1), Title: title}
	peak := int64(0)
	for _, n := range counts {
		peak = max(peak, n)
	}
	for i, n := range counts {
		if n == 0 {
			continue
		}
		h := max(int(n*int64(v.Axis)/peak), 1)
		v.Bars = append(v.Bars, sparkBar{X: i * (sparkBarWidth + sparkGap), Y: v.Axis - h, Height: h})
	}
	return v
}
