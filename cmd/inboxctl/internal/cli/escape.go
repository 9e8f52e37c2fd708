package cli

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Every text inboxctl prints that came from the database (ids, consumers,
// event types, errors, metadata, payloads, notes, process names) is the
// messages' own, written by whoever sent them: it goes through escape,
// which shows a control character as its escape (\x1b, \r, \u009b)
// instead of sending it to the terminal, where ESC [2J would clear the
// screen and ESC ]0;… BEL rename the window. A table cell is cut after
// escaping (cell), so that a cut never leaves half an escape sequence
// for the terminal to swallow the rest of the output with.

// escapeMode says which characters escape leaves as they are.
type escapeMode int

const (
	// oneLineText escapes line breaks and tabs too: a table cell, a
	// field, a word in a sentence.
	oneLineText escapeMode = iota
	// blockText keeps line breaks and tabs, which lay out a payload or a
	// stack trace; a carriage return, which could overwrite a line, is
	// escaped.
	blockText
	// shellText is oneLineText inside bash's $'…' quoting, where a
	// backslash and a single quote need escaping too.
	shellText
)

// escape returns s with every character a terminal would act on shown as
// its escape, in mode.
func escape(s string, mode escapeMode) string {
	if !needsEscape(s, mode) {
		return s
	}
	var b strings.Builder
	for _, unit := range escapeUnits(s, mode) {
		b.WriteString(unit)
	}
	return b.String()
}

// clean is escape for one line: what a table cell or a sentence shows of
// a text from the database.
func clean(s string) string { return escape(s, oneLineText) }

// cleanBlock is escape for a block of lines: a payload, a stack trace.
func cleanBlock(s string) string { return escape(s, blockText) }

// cell makes s fit one table cell: its first line only (" …" marks the
// rest), escaped, at most n characters wide, cut between two escapes,
// never inside one ("…" marks the cut).
func cell(s string, n int) string {
	rest := ""
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s, rest = s[:i], " …"
	}
	return cut(clean(s)+rest, n)
}

// cut shortens an escaped text to at most n characters, "…" included,
// cutting before whole escapes only (an escape is the text escape made of
// one character).
func cut(escaped string, n int) string {
	if utf8.RuneCountInString(escaped) <= n {
		return escaped
	}
	return cutUnits(escaped, n-1) + "…"
}

// cutUnits returns the longest start of an escaped text that is at most n
// characters and ends between two escapes.
func cutUnits(escaped string, n int) string {
	width, i := 0, 0
	for i < len(escaped) {
		unit := escapedUnit(escaped[i:])
		w := utf8.RuneCountInString(unit)
		if width+w > n {
			break
		}
		width += w
		i += len(unit)
	}
	return escaped[:i]
}

// escapedUnit returns the first unit of an escaped text: a whole escape
// (\x1b, \u009b, \n, \\), or one character.
func escapedUnit(s string) string {
	if len(s) >= 2 && s[0] == '\\' {
		switch s[1] {
		case 'x':
			if len(s) >= 4 && isHex(s[2:4]) {
				return s[:4]
			}
		case 'u':
			if len(s) >= 6 && isHex(s[2:6]) {
				return s[:6]
			}
		case 'a', 'b', 'f', 'n', 'r', 't', 'v', '\\', '\'':
			return s[:2]
		}
	}
	_, size := utf8.DecodeRuneInString(s)
	return s[:size]
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// needsEscape reports whether escape would change s.
func needsEscape(s string, mode escapeMode) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return true
			}
		}
		if mode == shellText && (r == '\\' || r == '\'') {
			return true
		}
		if acts(r, mode) {
			return true
		}
	}
	return false
}

// acts reports whether a terminal may act on r rather than show it: a C0
// or C1 control character, DEL, a line or paragraph separator, or one of
// the controls that reorder bidirectional text (which can make a line
// read other than it is). In blockText a line feed and a tab are layout.
func acts(r rune, mode escapeMode) bool {
	switch {
	case mode == blockText && (r == '\n' || r == '\t'):
		return false
	case r < 0x20, r == 0x7f, 0x80 <= r && r < 0xa0:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, 0x2028 <= r && r <= 0x202e, 0x2066 <= r && r <= 0x2069:
		return true
	}
	return false
}

// escapeUnits splits s into what escape shows: each character as it is,
// or as its escape.
func escapeUnits(s string, mode escapeMode) []string {
	units := make([]string, 0, len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			units = append(units, fmt.Sprintf(`\x%02x`, s[i]))
		case mode == shellText && (r == '\\' || r == '\''):
			units = append(units, `\`+string(r))
		case acts(r, mode):
			units = append(units, escapeRune(r))
		default:
			units = append(units, s[i:i+size])
		}
		i += size
	}
	return units
}

// escapeRune is r's escape, as Go (and bash's $'…') write it.
func escapeRune(r rune) string {
	switch r {
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\v':
		return `\v`
	}
	if r < 0x80 {
		return fmt.Sprintf(`\x%02x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// jsonSafe makes encoded JSON safe for a terminal too: encoding/json
// already escapes the C0 controls, and leaves DEL, the C1 controls, and
// the bidirectional-text controls as they are; jsonSafe writes those as
// \u escapes. They can only occur inside strings, so the JSON means the
// same.
func jsonSafe(encoded []byte) []byte {
	if !needsEscape(string(encoded), blockText) {
		return encoded
	}
	var b bytes.Buffer
	for _, r := range string(encoded) {
		if r != '\n' && acts(r, blockText) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.Bytes()
}

// cleanList is texts from the database as a list in a sentence: each
// escaped, joined with commas.
func cleanList(texts []string) string {
	out := make([]string, len(texts))
	for i, s := range texts {
		out[i] = clean(s)
	}
	return strings.Join(out, ", ")
}
