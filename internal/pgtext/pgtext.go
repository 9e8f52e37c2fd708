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
