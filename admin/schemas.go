package admin

import (
	"context"
	"fmt"

	"github.com/pgbox/pgbox"
)

// SchemaLookup is what LookUpSchema finds in a database.
type SchemaLookup struct {
	// Exists reports whether the schema looked up exists.
	Exists bool
	// Migrations reports whether it holds pgbox's migrations table: a
	// schema migrated once, whose migrations were all rolled back (or are
	// under way).
	Migrations bool
	// Pgbox lists the database's schemas that hold pgbox's tables (its
	// migrations table and its inbox), by name.
	Pgbox []string
}

// lookUpSchemaSQL reports whether schema $1 exists, whether it holds
// pgbox's migrations table ($2), and which schemas hold that table and an
// inbox, from the catalog (a few small reads, whatever the tables hold).
const lookUpSchemaSQL = `
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace AS n WHERE n.nspname::text = $1::text),
       EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
               WHERE n.nspname::text = $1::text AND c.relname::text = $2::text AND c.relkind IN ('r', 'p')),
       coalesce((SELECT array_agg(n.nspname::text ORDER BY n.nspname::text)
                 FROM pg_catalog.pg_namespace AS n
                 WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c
                               WHERE c.relnamespace = n.oid AND c.relname::text = $2::text AND c.relkind IN ('r', 'p'))
                   AND EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c
                               WHERE c.relnamespace = n.oid AND c.relname::text = 'inbox' AND c.relkind IN ('r', 'p'))),
                '{}'::text[])`

// LookUpSchema reports whether schema exists in db's database, and which
// schemas there hold pgbox's tables: what to tell someone whose schema
// pgbox.CheckSchema found not migrated, who may have mistyped its name
// (and would create an empty schema by migrating it) or be connected to
// the wrong database.
func LookUpSchema(ctx context.Context, db pgbox.Querier, schema string) (SchemaLookup, error) {
	var l SchemaLookup
	if err := db.QueryRow(ctx, lookUpSchemaSQL, schema, pgbox.MigrationsTable).Scan(&l.Exists, &l.Migrations, &l.Pgbox); err != nil {
		return l, fmt.Errorf("look up schema %s: %w", schema, err)
	}
	return l, nil
}
