package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/pgbox/pgbox/cmd/inboxctl/internal/human"
)

// newTable returns a writer that aligns tab-separated columns.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// stamp formats t in UTC to the second, the way every table shows time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// age formats a duration for a human in a hurry: "4m12s", "3h5m", "2d4h".
func age(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		days := int(d / (24 * time.Hour))
		return fmt.Sprintf("%dd%dh", days, int((d%(24*time.Hour))/time.Hour))
	}
}

// count and plural are package human's, under the short names the
// tables use.
var (
	count  = human.Count
	plural = human.Plural
)

// renderPayload describes a payload for humans: see human.Payload.
func renderPayload(p []byte) (kind, text string) { return human.Payload(p) }

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// isTerminal reports whether w is a terminal (for redrawing in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
