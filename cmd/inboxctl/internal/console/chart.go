package console

import (
	"fmt"
	"html/template"
	"strings"
)

// spark draws counts (one per bucket, oldest first) as a small SVG bar
// chart, each bar scaled to the busiest bucket, with title as its
// tooltip. The SVG is made from numbers alone, and the title is escaped,
// so it is safe to put in a page as is.
func spark(counts []int64, title string) template.HTML {
	const (
		height = 24
		barW   = 3
		gap    = 1
	)
	peak := int64(0)
	for _, n := range counts {
		peak = max(peak, n)
	}
	width := max(len(counts)*(barW+gap)-gap, 1)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`,
		width, height, width, height, template.HTMLEscapeString(title), template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<line x1="0" y1="%d" x2="%d" y2="%d" class="axis"/>`, height-1, width, height-1)
	for i, n := range counts {
		if n == 0 || peak == 0 {
			continue
		}
		h := max(int(n*int64(height-1)/peak), 1)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d"/>`, i*(barW+gap), height-1-h, barW, h)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // numbers and escaped text only
}
