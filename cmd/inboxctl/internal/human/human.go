// Package human formats counts and payloads for people, the same way in
// inboxctl's tables and in its web console.
package human

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Count formats n with thousands separators: 18,022.
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
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

// Plural counts n of word, in the singular or plural as English wants:
// "1 message", "12,000 messages".
func Plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return Count(n) + " " + word + "s"
}

// The kinds of payload Payload tells apart.
const (
	PayloadEmpty  = "empty"
	PayloadJSON   = "JSON"
	PayloadText   = "text"
	PayloadBinary = "binary, hex"
)

// Payload describes a payload for people: its kind, and its text as
// shown: indented JSON when it is JSON, the text when it is printable
// UTF-8, otherwise a hex dump (without its last newline); "" when empty.
// The text is the payload's own: a page must escape it like any text.
func Payload(p []byte) (kind, text string) {
	if len(p) == 0 {
		return PayloadEmpty, ""
	}
	var b bytes.Buffer
	if json.Valid(p) && json.Indent(&b, p, "", "  ") == nil {
		return PayloadJSON, b.String()
	}
	if utf8.Valid(p) && !strings.ContainsFunc(string(p), unprintable) {
		return PayloadText, string(p)
	}
	return PayloadBinary, strings.TrimSuffix(hex.Dump(p), "\n")
}

// unprintable reports a control character other than a line break or a
// tab.
func unprintable(r rune) bool {
	return r < 0x20 && r != '\n' && r != '\r' && r != '\t'
}
