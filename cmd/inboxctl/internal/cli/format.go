package cli

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"
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

// count formats n with thousands separators: 18,022.
func count(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// plural counts n of word, in the singular or plural as English wants:
// "1 message", "12,000 messages".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return count(n) + " " + word + "s"
}

// oneLine makes s fit one table cell: first line only, at most n runes.
func oneLine(s string, n int) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " …"
	}
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n-1]) + "…"
	}
	return s
}

// renderPayload describes a payload for humans: pretty JSON when it is
// JSON, text when it is printable UTF-8, otherwise a hex dump.
func renderPayload(p []byte) (kind, text string) {
	if len(p) == 0 {
		return "empty", ""
	}
	if json.Valid(p) {
		var b bytes.Buffer
		if json.Indent(&b, p, "", "  ") == nil {
			return "JSON", b.String()
		}
	}
	if utf8.Valid(p) && printable(p) {
		return "text", string(p)
	}
	return "binary, hex", strings.TrimRight(hex.Dump(p), "\n")
}

func printable(p []byte) bool {
	for _, r := range string(p) {
		if r < 0x20 && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// isTerminal reports whether w is a terminal (for redrawing in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
