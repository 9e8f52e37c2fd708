package cli

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// What show and outbox show print of a payload without --full: a screen or
// two. A 100 KB binary payload is 6,400 lines of hex, which would push the
// message's history out of sight.
const (
	payloadShownLines = 50
	payloadShownChars = 4000
)

// printPayload prints a payload's kind and size, then its text (escaped),
// cut to payloadShownLines and payloadShownChars unless full, saying how
// much it cut and, with fullHint, how to see all of it.
func (a *app) printPayload(p []byte, full bool, fullHint string) {
	kind, text := renderPayload(p)
	fmt.Fprintf(a.out, "\nPayload (%s, %d bytes)\n", kind, len(p))
	if text == "" {
		return
	}
	text = cleanBlock(text)
	if full {
		fmt.Fprintln(a.out, indent(text, "  "))
		return
	}
	shown, how := cutBlock(text, payloadShownLines, payloadShownChars)
	fmt.Fprintln(a.out, indent(shown, "  "))
	if how != "" {
		fmt.Fprintf(a.out, "  (cut: %s shown; all of it: %s)\n", how, fullHint)
	}
}

// cutBlock cuts an escaped block of text to at most maxLines lines and
// maxChars characters, between two escapes, and says what it kept: "the
// first 50 of 6,400 lines", "the first 4,000 of 10,000 characters"; ""
// when it kept everything.
func cutBlock(text string, maxLines, maxChars int) (string, string) {
	lines := strings.Count(text, "\n") + 1
	chars := utf8.RuneCountInString(text)
	if lines > maxLines {
		// Every line but the last ends with its "\n": the first maxLines
		// end where the maxLines-th "\n" is.
		end := 0
		for range maxLines {
			end += strings.IndexByte(text[end:], '\n') + 1
		}
		shown := text[:end-1]
		if utf8.RuneCountInString(shown) <= maxChars {
			return shown, fmt.Sprintf("the first %s of %s lines", count(int64(maxLines)), count(int64(lines)))
		}
	}
	if chars > maxChars {
		return cutUnits(text, maxChars), fmt.Sprintf("the first %s of %s characters", count(int64(maxChars)), count(int64(chars)))
	}
	return text, ""
}
