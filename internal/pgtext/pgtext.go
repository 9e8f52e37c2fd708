// Package pgtext checks strings bound for PostgreSQL text columns and
// identifiers, so that bad input is refused with a clear message before it
// reaches the server (which would reject invalid UTF-8 and NUL with an
// encoding error, or silently truncate a long identifier).
package pgtext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Check returns the first reason s cannot be stored: empty when required,
// longer than maxBytes, not valid UTF-8, or holding a NUL character. field
// names s in the message, such as "ID" or "Config.Consumer".
func Check(field, s string, maxBytes int, required bool) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("%s is empty: set it", field)
	case len(s) > maxBytes:
		return fmt.Errorf("%s is %d bytes, over the %d-byte limit: use a shorter value", field, len(s), maxBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", field)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%s contains a NUL character, which PostgreSQL text cannot store", field)
	}
	return nil
}

// CheckMetadata returns the first reason md cannot be stored as a jsonb
// object of strings: a key or value that is not valid UTF-8 (JSON encoding
// would silently replace the bad bytes) or holds a NUL character (jsonb
// rejects \u0000).
func CheckMetadata(md map[string]string) error {
	for k, v := range md {
		for _, s := range []string{k, v} {
			if !utf8.ValidString(s) {
				return fmt.Errorf("metadata %q holds invalid UTF-8: metadata is stored as JSON text; put binary data in the payload", k)
			}
			if strings.ContainsRune(s, 0) {
				return fmt.Errorf("metadata %q holds a NUL character, which PostgreSQL's jsonb cannot store: remove it", k)
			}
		}
	}
	return nil
}

// Clean makes s storable as PostgreSQL text, whatever it holds: invalid
// UTF-8 is replaced, NUL is spelled out, and anything past limit bytes is
// cut (on a character boundary) and marked. It is for text pgbox records on
// the user's behalf, such as a handler's error, which must never make the
// recording fail.
func Clean(s string, limit int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\\0"), "\uFFFD")
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + " … (truncated)"
	}
	return s
}
