// Package ident validates and quotes the PostgreSQL schema that holds pgbox's
// tables, renders queries for it, and names its notification channels.
//
// The schema name is user input (a config field, a CLI flag). It is checked
// once here and from then on appears in SQL only as a quoted identifier, so
// no name, however odd, can change the meaning of a statement.
package ident

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/internal/pgtext"
)

// maxIdentBytes is PostgreSQL's NAMEDATALEN-1: longer identifiers are
// silently truncated by the server, which would make two long schema names
// collide. We reject them instead.
const maxIdentBytes = 63

// schemaPlaceholder marks where a query names the schema, as in
// "SELECT … FROM /* schema */inbox".
const schemaPlaceholder = "/* schema */"

// ValidateSchema reports whether name can be used as pgbox's schema: 1 to 63
// bytes of valid UTF-8 without NUL. Anything else PostgreSQL accepts in a
// quoted identifier is allowed, because the name is always quoted.
func ValidateSchema(name string) error {
	if name == "" {
		return errors.New("schema name is empty: leave it unset for the default \"pgbox\", or name a schema")
	}
	return pgtext.Check(fmt.Sprintf("schema name %q", name), name, maxIdentBytes, true)
}

// Quote returns name as a quoted SQL identifier. Call ValidateSchema first.
func Quote(name string) string {
	return pgx.Identifier{name}.Sanitize()
}

// Render returns query with every "/* schema */" placeholder replaced by the
// quoted schema and a dot, so that "/* schema */inbox" becomes "pgbox".inbox.
func Render(query, schema string) string {
	return strings.ReplaceAll(query, schemaPlaceholder, Quote(schema)+".")
}

// Channel returns the LISTEN/NOTIFY channel on which rows of the given kind
// ("inbox", "outbox") in schema are announced. Channel names share the 63-byte
// identifier limit; a schema too long to fit is replaced by a hash of itself.
func Channel(schema, kind string) string {
	name := schema + "." + kind
	if len(name) <= maxIdentBytes {
		return name
	}
	sum := sha256.Sum256([]byte(schema))
	return "pgbox_" + hex.EncodeToString(sum[:12]) + "." + kind
}
