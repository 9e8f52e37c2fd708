package cli

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// A mistyped --schema is told so, with the schemas that hold pgbox's
// tables, never "run inboxctl migrate up", which would create an empty
// schema of the typo; migrate up itself still creates a schema.
func TestMistypedSchema(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	on := func(schema string, args ...string) result { // inboxctl on another schema than the fixture's
		return inboxctlEnv(t, map[string]string{"DATABASE_URL": pgtest.URL(t)}, "", append(args, "--schema", schema)...)
	}

	typo := on(schema+"x", "stats")
	require.Equal(t, ExitFailure, typo.code)
	require.Contains(t, typo.stderr, `inboxctl: schema "`+schema+`x" does not exist in database "pgbox"`)
	require.Contains(t, typo.stderr, "Did you mean --schema "+schema+"?")
	require.Regexp(t, `Schemas holding pgbox tables there( \(\d+; the 10 nearest\))?: `+schema+`(,|\.)`, typo.stderr, "nearest first")
	require.NotContains(t, typo.stderr, "migrate up")
	require.Empty(t, typo.stdout)

	for _, args := range [][]string{{"list"}, {"failures"}, {"show", "order-1/placed"}, {"replay", "--all", "--dry-run"}, {"processes"}} {
		r := on(schema+"x", args...)
		require.Equal(t, ExitFailure, r.code, "%q", args)
		require.Contains(t, r.stderr, "does not exist", "%q", args)
		require.NotContains(t, r.stderr, "migrate up", "%q", args)
	}

	// A schema that exists but holds no pgbox tables (someone else's).
	other := pgtest.EmptySchema(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), "CREATE SCHEMA "+ident.Quote(other))
	require.NoError(t, err)
	r := on(other, "stats")
	require.Equal(t, ExitFailure, r.code)
	require.Contains(t, r.stderr, `inboxctl: schema "`+other+`" holds no pgbox tables.`)
	require.Contains(t, r.stderr, schema, "the schema with pgbox's tables is listed")
	require.NotContains(t, r.stderr, "migrate up")

	// migrate up still creates the schema it is given.
	fresh := pgtest.EmptySchema(t)
	inboxctl(t, fresh, "", "migrate", "up").ok(t)
	inboxctl(t, fresh, "", "stats").ok(t)
}

// With no schema holding pgbox's tables (a new database, or the wrong
// one), the advice names both the DSN and the command that installs them.
func TestSchemaAdvice(t *testing.T) {
	t.Parallel()
	where := `database "orders" on db:5432`
	require.Equal(t, `schema "pgbox" does not exist in database "orders" on db:5432, and no schema there holds pgbox tables: `+
		`check --dsn (or DATABASE_URL). To install pgbox in a new schema "pgbox": inboxctl migrate up`,
		schemaAdvice("pgbox", admin.SchemaLookup{}, where, "inboxctl migrate up"))
	require.Equal(t, `schema "pgbx" does not exist in database "orders" on db:5432. Did you mean --schema pgbox? `+
		`Schemas holding pgbox tables there: pgbox, billing.`,
		schemaAdvice("pgbx", admin.SchemaLookup{Pgbox: []string{"billing", "pgbox"}}, where, ""))
	require.Equal(t, `schema "public" holds no pgbox tables. Schemas holding pgbox tables in database "orders" on db:5432: `+
		`pgbox, billing: pass one with --schema.`,
		schemaAdvice("public", admin.SchemaLookup{Exists: true, Pgbox: []string{"billing", "pgbox"}}, where, ""))
	many := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b1", "b2", "pgbox"}
	require.Equal(t, `schema "pgbox" holds pgbox's migrations table but no pgbox tables (its migrations were rolled back): `+
		`run inboxctl migrate up to create them again`,
		schemaAdvice("pgbox", admin.SchemaLookup{Exists: true, Migrations: true, Pgbox: many}, where, "inboxctl migrate up"))
	require.Contains(t, schemaAdvice("pgbx", admin.SchemaLookup{Pgbox: many}, where, ""), "Schemas holding pgbox tables there (12; the 10 nearest): pgbox, b1, b2, a1,")
}
