package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/pgbox/pgbox/internal/pgtext"
)

// requestKey is where a request's key lives: its route, its caller and the
// key itself.
type requestKey struct {
	caller, key, route string
}

// readKey returns the key r carries in header. present is false when the
// header is absent; a header that is present but unusable gives the reason,
// which the client sees in a 400 problem.
//
// The IETF draft makes the field a Structured Field string ("…", with \"
// and \\ escapes); most clients send the bare key. Both are accepted, and
// `"abc"` and `abc` are the same key. Either way the key must be 1 to
// MaxKeyBytes bytes of printable ASCII (space to tilde): anything else is
// likelier a client bug than a key, and refusing it keeps keys safe to log
// and to show.
func readKey(r *http.Request, header string) (key string, present bool, err error) {
	values := r.Header.Values(header)
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, fmt.Errorf("the request has %d %s header fields: send exactly one", len(values), header)
	}
	key = values[0]
	if strings.HasPrefix(key, `"`) {
		if key, err = unquote(key); err != nil {
			return "", true, fmt.Errorf("the %s header is not a valid Structured Field string: %v", header, err)
		}
	}
	switch {
	case key == "":
		return "", true, fmt.Errorf("the %s header is empty: send a unique key, such as a UUID", header)
	case len(key) > MaxKeyBytes:
		return "", true, fmt.Errorf("the %s header is %d bytes, over the %d-byte limit: use a shorter key, such as a UUID", header, len(key), MaxKeyBytes)
	}
	for i := range len(key) {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return "", true, fmt.Errorf("the %s header holds the byte 0x%02x at offset %d: keys are printable ASCII", header, c, i)
		}
	}
	return key, true, nil
}

// unquote decodes an RFC 9651 sf-string: DQUOTE *( unescaped / "\" ( DQUOTE
// / "\" ) ) DQUOTE, with unescaped being printable ASCII but " and \.
func unquote(s string) (string, error) {
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", fmt.Errorf("it has no closing quote")
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s)-1 || (s[i] != '"' && s[i] != '\\') {
				return "", fmt.Errorf("only \\\" and \\\\ may be escaped")
			}
			b.WriteByte(s[i])
		case c == '"':
			return "", fmt.Errorf("it has an unescaped quote inside")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// scopeName makes a route or caller name storable as a key column: names
// over MaxKeyBytes bytes, or with bytes PostgreSQL text cannot hold, are
// replaced by their SHA-256, which is as good a name for matching.
func scopeName(s string) string {
	if pgtext.Check("", s, MaxKeyBytes, false) == nil {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fingerprint identifies the request a key was first used for: its method,
// its target (path and query, as sent) and its body. Neither the method nor
// the target can hold a newline, so the encoding is unambiguous.
func fingerprint(r *http.Request, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.RequestURI() + "\n"))
	h.Write(body)
	return h.Sum(nil)
}
