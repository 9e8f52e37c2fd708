package pgbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pooled"
)

// DefaultSchema is the PostgreSQL schema that holds pgbox's tables unless a
// Config or flag names another.
const DefaultSchema = "pgbox"

// SchemaVersion is the migration version this build of pgbox needs. The
// migrations package applies migrations up to exactly this version.
const SchemaVersion = 12

// Metadata keys the relay sets on each message it publishes, and a
// Watermill subscriber storing messages into an inbox reads by default.
const (
	// MetadataEventType carries the message's event type, which routes it
	// to a dispatcher handler.
	MetadataEventType = "event_type"
	// MetadataOrderingKey carries the message's ordering key.
	MetadataOrderingKey = "ordering_key"
)

// MigrationsTable is the goose version table inside pgbox's schema.
const MigrationsTable = "goose_db_version"

// ErrSchemaNotMigrated is returned when pgbox's schema or its tables do not
// exist yet: run `inboxctl migrate up` or call migrations.Migrate.
var ErrSchemaNotMigrated = errors.New("pgbox schema not migrated")

// ErrSchemaDamaged is returned by CheckSchema when the schema is at this
// build's version but has lost a row that pgbox's writes need, which no
// migration will put back.
var ErrSchemaDamaged = errors.New("pgbox schema damaged")

// SchemaVersionError is returned when pgbox's schema exists but is at a
// different migration version than this build needs. It matches
// ErrSchemaNotMigrated with errors.Is when the schema is behind.
type SchemaVersionError struct {
	// Have is the version the schema is at.
	Have int64
	// Schema is the name of the schema.
	Schema string
	// Want is the version this build needs (SchemaVersion).
	Want int64
}

// Error says which way the versions differ and what to do about it.
func (e *SchemaVersionError) Error() string {
	if e.Have < e.Want {
		return fmt.Sprintf("schema %s is at version %d, this build needs %d: run inboxctl migrate up", e.Schema, e.Have, e.Want)
	}
	return fmt.Sprintf("schema %s is at version %d, newer than this build (which needs %d): deploy a newer pgbox, or run inboxctl migrate down from the newer build", e.Schema, e.Have, e.Want)
}

// Is reports ErrSchemaNotMigrated for a schema that is behind this build.
func (e *SchemaVersionError) Is(target error) bool {
	return target == ErrSchemaNotMigrated && e.Have < e.Want
}

// Querier is the part of a pgx pool, connection or transaction that
// CheckSchema needs.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckSchema verifies that schema exists and is migrated to exactly
// SchemaVersion. It returns nil, an error matching ErrSchemaNotMigrated, a
// *SchemaVersionError, or the database error that prevented the check (an
// unreachable server, say).
func CheckSchema(ctx context.Context, db Querier, schema string) error {
	if err := ident.ValidateSchema(schema); err != nil {
		return err
	}
	var have *int64
	err := db.QueryRow(ctx, ident.Render("SELECT max(version_id) FROM /* schema */"+MigrationsTable, schema)).Scan(&have)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"): // undefined_table, invalid_schema_name
		return fmt.Errorf("%w: schema %s has no pgbox tables: run inboxctl migrate up (or call migrations.Migrate)", ErrSchemaNotMigrated, schema)
	case err != nil:
		return fmt.Errorf("check schema %s: %w", schema, pooled.Explain(err))
	case have == nil || *have == 0:
		return fmt.Errorf("%w: schema %s has no pgbox migrations applied: run inboxctl migrate up (or call migrations.Migrate)", ErrSchemaNotMigrated, schema)
	case *have != SchemaVersion:
		return &SchemaVersionError{Have: *have, Schema: schema, Want: SchemaVersion}
	}
	return nil
}

// CheckPartitioning verifies that schema, migrated to SchemaVersion
// (CheckSchema), still has the rows of its partitioning table, which say
// which partition each message goes in: without the inbox's, no message
// can be received. It returns nil, an error matching ErrSchemaDamaged, or
// the database error that prevented the check. The health check runs it;
// the dispatcher, the relay and inboxctl, which work without the rows, do
// not, so that an operator can still inspect and drain a damaged schema.
func CheckPartitioning(ctx context.Context, db Querier, schema string) error {
	if err := ident.ValidateSchema(schema); err != nil {
		return err
	}
	var lost []string
	if err := db.QueryRow(ctx, ident.Render(lostPartitioningSQL, schema)).Scan(&lost); err != nil {
		return fmt.Errorf("check schema %s: %w", schema, err)
	}
	if len(lost) == 0 {
		return nil
	}
	what := map[string]string{
		"inbox":  "no message can be received",
		"outbox": "the maintenance job can neither make nor drop the outbox's partitions",
	}
	var why []string
	for _, table := range lost {
		why = append(why, fmt.Sprintf("no row for the %s (%s)", table, what[table]))
	}
	return fmt.Errorf("%w: %s.partitioning has %s; migration 9 wrote each row, which says which partition each message goes in, "+
		"and something has deleted it since: restore it from a backup of the schema, as it was", ErrSchemaDamaged, schema, strings.Join(why, " and "))
}

// lostPartitioningSQL lists the tables whose row of the partitioning table,
// which migration 9 writes and nothing of pgbox's deletes, is missing.
const lostPartitioningSQL = `
SELECT coalesce(array_agg(t.name ORDER BY t.name), '{}')
FROM unnest(ARRAY['inbox', 'outbox']) AS t(name)
WHERE NOT EXISTS (SELECT 1 FROM /* schema */partitioning AS p WHERE p.table_name = t.name)`
