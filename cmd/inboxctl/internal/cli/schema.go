package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// schemaNotMigrated explains a schema pgbox.CheckSchema found without
// pgbox's tables (err). The check's own advice, "run inboxctl migrate up",
// would create an empty schema of a typo, so it says instead whether the
// schema exists at all, and which schemas of the database hold pgbox's
// tables, the nearest first; it offers migrate up only when none does (a
// new database, or the wrong one).
func (a *app) schemaNotMigrated(ctx context.Context, err error) error {
	l, lookErr := admin.LookUpSchema(ctx, a.pool, a.schema)
	if lookErr != nil {
		return err // the check's verdict stands: nothing better to say
	}
	c := a.pool.Config().ConnConfig
	where := fmt.Sprintf("database %q on %s:%d", c.Database, c.Host, c.Port)
	advice := schemaAdvice(a.schema, l, where, a.hint("migrate", "up"))
	return fmt.Errorf("%s%w", advice, errNoAdvice{pgbox.ErrSchemaNotMigrated})
}

// errNoAdvice wraps an error that an explanation replaces: it matches it
// (errors.Is), and adds nothing to the message.
type errNoAdvice struct{ err error }

func (e errNoAdvice) Error() string { return "" }

func (e errNoAdvice) Unwrap() error { return e.err }

// schemasListed is how many schemas holding pgbox's tables schemaAdvice
// names at most.
const schemasListed = 10

// schemaAdvice is what to tell someone whose schema holds no pgbox
// tables, from what l found in the database where says: that it does not
// exist (or holds none), and the schemas that do hold them, nearest
// first; or, when none does, to check the DSN or install pgbox
// (migrateHint); or, for a schema whose migrations were rolled back, to
// migrate it up again.
func schemaAdvice(schema string, l admin.SchemaLookup, where, migrateHint string) string {
	exists, have := l.Exists, l.Pgbox
	if l.Migrations {
		return fmt.Sprintf("schema %q holds pgbox's migrations table but no pgbox tables (its migrations were rolled back): "+
			"run %s to create them again", schema, migrateHint)
	}
	var b strings.Builder
	if exists {
		fmt.Fprintf(&b, "schema %q holds no pgbox tables", schema)
	} else {
		fmt.Fprintf(&b, "schema %q does not exist in %s", schema, where)
	}
	switch {
	case len(have) == 0 && exists:
		fmt.Fprintf(&b, ", nor does any other schema in %s: check --dsn (or DATABASE_URL). To install pgbox in schema %q: %s",
			where, schema, migrateHint)
		return b.String()
	case len(have) == 0:
		fmt.Fprintf(&b, ", and no schema there holds pgbox tables: check --dsn (or DATABASE_URL). To install pgbox in a new schema %q: %s",
			schema, migrateHint)
		return b.String()
	}
	b.WriteString(".")
	near := nearest(schema, have)
	guess := near[0]
	close := distance(schema, guess)*4 <= len([]rune(schema)) // a typo, not another name
	if close {
		fmt.Fprintf(&b, " Did you mean --schema %s?", shellQuote(guess))
	}
	listed, how := near, ""
	if len(have) > schemasListed {
		listed, how = near[:schemasListed], fmt.Sprintf(" (%d; the %d nearest)", len(have), schemasListed)
	}
	if exists {
		fmt.Fprintf(&b, " Schemas holding pgbox tables in %s%s: %s", where, how, cleanList(listed))
	} else {
		fmt.Fprintf(&b, " Schemas holding pgbox tables there%s: %s", how, cleanList(listed))
	}
	if !close {
		b.WriteString(": pass one with --schema")
	}
	b.WriteString(".")
	return b.String()
}

// nearest returns names sorted by their edit distance from name, nearest
// first, then by name.
func nearest(name string, names []string) []string {
	out := slices.Clone(names)
	slices.SortStableFunc(out, func(x, y string) int { return cmp.Compare(distance(name, x), distance(name, y)) })
	return out
}

// distance is the edit distance (Levenshtein) between a and b, ignoring
// case: how many characters to insert, delete or change to make one the
// other.
func distance(a, b string) int {
	x, y := []rune(strings.ToLower(a)), []rune(strings.ToLower(b))
	row := make([]int, len(y)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(x); i++ {
		prev := row[0]
		row[0] = i
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			prev, row[j] = row[j], min(row[j]+1, row[j-1]+1, prev+cost)
		}
	}
	return row[len(y)]
}

// isNotMigrated reports whether err is pgbox.CheckSchema's verdict of a
// schema without pgbox's tables.
func isNotMigrated(err error) bool { return errors.Is(err, pgbox.ErrSchemaNotMigrated) }
