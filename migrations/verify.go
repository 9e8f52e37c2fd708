package migrations

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
)

// pgboxTables are the tables pgbox's migrations create, at SchemaVersion.
// TestTablesListsEveryTable keeps the list honest.
var pgboxTables = []string{"audit_log", "consumer_pauses", "idempotency_keys", "inbox", "inbox_claims", "inbox_conflicts", "inbox_payload_edits", "outbox", "outbox_claims", "partitioning", "processes", "scheduled_replays"}

// riverTables are River's tables that every River version pgbox carries
// has; RiverVersion checks the rest.
var riverTables = []string{"river_job", "river_leader", "river_migration", "river_queue"}

// locateTablesSQL lists the schemas holding a table of each given name,
// for each name first the schemas without a version table of their own:
// where tables misplaced by another search_path would be (other pgbox
// schemas in the database hold the same tables, rightly).
const locateTablesSQL = `
SELECT c.relname, n.nspname
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relname = ANY($1)
ORDER BY 1,
	EXISTS (SELECT 1 FROM pg_catalog.pg_class v WHERE v.relnamespace = n.oid AND v.relname = $2),
	2`

// maxElsewhere caps the schemas an error names per missing table.
const maxElsewhere = 3

// verify checks, after Up, that goose's version table, pgbox's tables and
// River's are all in the schema, at SchemaVersion and River's newest
// version. The migrator names the schema in everything it runs, so a
// failure here means that something else put tables where they do not
// belong (a migration run by an older pgbox whose search_path a pooler
// dropped, a tool applying the files by hand), or that the version table
// claims migrations whose tables are missing. Up reports that rather than
// return a schema that pgbox's services would then fail on one query at a
// time.
func (m *Migrator) verify(ctx context.Context) error {
	want := append(append([]string{pgbox.MigrationsTable}, pgboxTables...), riverTables...)
	rows, err := m.pool.Query(ctx, locateTablesSQL, want, pgbox.MigrationsTable)
	if err != nil {
		return m.explain(fmt.Errorf("check where the tables are: %w", err))
	}
	type location struct{ Table, Schema string }
	locations, err := pgx.CollectRows(rows, pgx.RowToStructByPos[location])
	if err != nil {
		return m.explain(fmt.Errorf("check where the tables are: %w", err))
	}
	var problems []string
	for _, table := range want {
		var elsewhere []string
		here := false
		for _, l := range locations {
			switch {
			case l.Table != table:
			case l.Schema == m.schema:
				here = true
			default:
				elsewhere = append(elsewhere, fmt.Sprintf("%q", l.Schema))
			}
		}
		switch {
		case here:
		case len(elsewhere) > maxElsewhere:
			problems = append(problems, fmt.Sprintf("%s is missing (found in schemas %s and %d more)",
				table, strings.Join(elsewhere[:maxElsewhere], ", "), len(elsewhere)-maxElsewhere))
		case len(elsewhere) > 0:
			problems = append(problems, fmt.Sprintf("%s is missing (found in schema %s)", table, strings.Join(elsewhere, ", ")))
		default:
			problems = append(problems, table+" is missing (and in no other schema)")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("migrations: schema %s is incomplete after migrating: %s. "+
			"This migrator names the schema in everything it runs, so these tables were created (or dropped) by something else: "+
			"an older pgbox migrating with a search_path that a connection pooler ignored, or SQL applied by hand. "+
			"If the tables found elsewhere are pgbox's, move them into %q (ALTER TABLE … SET SCHEMA) or drop them; "+
			"if the version table claims migrations whose tables are missing, delete its rows newer than what is really there; "+
			"then run the migration again",
			m.schema, strings.Join(problems, "; "), m.schema)
	}
	if err := pgbox.CheckSchema(ctx, m.pool, m.schema); err != nil {
		return fmt.Errorf("migrations: after migrating: %w", err)
	}
	if err := pgbox.CheckPartitioning(ctx, m.pool, m.schema); err != nil {
		return fmt.Errorf("migrations: after migrating: %w", err)
	}
	have, wantRiver, err := m.RiverVersion(ctx)
	if err != nil {
		return err
	}
	if have != wantRiver {
		return fmt.Errorf("migrations: schema %s: River's tables are at version %d after migrating, want %d: "+
			"check river_migration in the schema (another River migrating it?), then run the migration again",
			m.schema, have, wantRiver)
	}
	return nil
}
