package migrations

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/pressly/goose/v3"

	"github.com/pgbox/pgbox/internal/ident"
)

// setSearchPathSQL points unqualified names at pgbox's schema for the rest
// of the current transaction only (set_config's third argument, like SET
// LOCAL): nothing outlives the migration's transaction, so no session state
// is left on a pooled server connection, and a session's own search_path
// (a startup parameter, a role's or database's default) cannot send the DDL
// elsewhere.
const setSearchPathSQL = "SELECT pg_catalog.set_config('search_path', $1, true)"

// migration is one embedded file, split into its two directions.
type migration struct {
	down    string
	name    string
	up      string
	version int64
}

// readMigrations reads and splits every embedded migration file, oldest
// first.
func readMigrations(files fs.FS) ([]migration, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	out := make([]migration, 0, len(names))
	for _, name := range names { // Glob sorts; the names are zero-padded
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, err
		}
		m, err := parseMigration(name, string(body))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// parseMigration splits a goose SQL file at its "-- +goose Up" and "--
// +goose Down" lines. Each direction then runs as one multi-statement
// string in the migration's transaction, so goose's statement splitting
// is not needed and StatementBegin/End lines are simply dropped. Any other annotation is refused rather than
// ignored: "NO TRANSACTION" in particular cannot work here, because the
// schema is set for the migration's transaction only.
func parseMigration(name, body string) (migration, error) {
	version, err := goose.NumericComponent(name)
	if err != nil {
		return migration{}, fmt.Errorf("migration file %s: %w", name, err)
	}
	m := migration{name: path.Base(name), version: version}
	var seenUp, seenDown bool
	var up, down strings.Builder
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, len(body)+1)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "-- +goose "); ok {
			switch strings.TrimSpace(rest) {
			case "Up":
				if seenUp || seenDown {
					return migration{}, fmt.Errorf("migration file %s: \"-- +goose Up\" must come once, before \"-- +goose Down\"", name)
				}
				seenUp = true
				continue
			case "Down":
				if !seenUp || seenDown {
					return migration{}, fmt.Errorf("migration file %s: \"-- +goose Down\" must come once, after \"-- +goose Up\"", name)
				}
				m.up = up.String()
				seenDown = true
				continue
			case "StatementBegin", "StatementEnd":
				continue
			default:
				return migration{}, fmt.Errorf("migration file %s: annotation %q is not supported: every pgbox migration runs in one transaction that sets the schema", name, strings.TrimSpace(line))
			}
		}
		switch {
		case seenDown:
			down.WriteString(line + "\n")
		case seenUp:
			up.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return migration{}, fmt.Errorf("migration file %s: %w", name, err)
	}
	if !seenUp || !seenDown {
		return migration{}, fmt.Errorf("migration file %s: needs both \"-- +goose Up\" and \"-- +goose Down\" sections", name)
	}
	m.down = down.String()
	return m, nil
}

// goMigrations turns the files into goose Go migrations for schema. Each
// runs in a transaction goose opens (and in which it records the version):
// the transaction first sets search_path to the quoted schema, then runs
// the file's SQL, whose tables are unqualified.
func goMigrations(files []migration, schema string) []*goose.Migration {
	run := func(sqlText string) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, setSearchPathSQL, ident.Quote(schema)); err != nil {
				return fmt.Errorf("set search_path for the migration: %w", err)
			}
			// No arguments: pgx sends the text with the simple protocol,
			// which runs several statements in one round trip, in every
			// query exec mode.
			_, err := tx.ExecContext(ctx, sqlText)
			return err
		}
	}
	out := make([]*goose.Migration, 0, len(files))
	for _, f := range files {
		out = append(out, goose.NewGoMigration(f.version,
			&goose.GoFunc{RunTx: run(f.up)},
			&goose.GoFunc{RunTx: run(f.down)},
		))
	}
	return out
}
