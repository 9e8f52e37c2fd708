package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/migrations"
)

func (a *app) migrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create, upgrade or roll back pgbox's tables",
		Long: `migrate applies pgbox's embedded migrations to the schema (created if needed).
Several migrators may run at once: they take turns on an advisory lock.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.migrateUpCommand(), a.migrateDownCommand(), a.migrateStatusCommand(), a.migrateVersionCommand(), a.migrateCheckCommand())
	return cmd
}

// migrator connects and returns a Migrator; the schema need not exist.
func (a *app) migrator(cmd *cobra.Command) (*migrations.Migrator, error) {
	if err := a.connect(cmd.Context()); err != nil {
		return nil, err
	}
	m, err := migrations.New(a.pool, migrations.Options{Schema: a.schema})
	if err != nil {
		return nil, usageError{err}
	}
	return m, nil
}

func (a *app) migrateUpCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "up",
		Short:   "Apply every pending migration",
		Example: `  inboxctl migrate up --schema pgbox`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := a.migrator(cmd)
			if err != nil {
				return err
			}
			defer m.Close()
			applied, err := m.Up(cmd.Context())
			for _, r := range applied {
				fmt.Fprintf(a.out, "applied %s (%s)\n", r.Name, r.Duration.Round(1000))
			}
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintf(a.out, "schema %q is up to date at version %d\n", a.schema, pgbox.SchemaVersion)
			} else {
				fmt.Fprintf(a.out, "schema %q is at version %d\n", a.schema, pgbox.SchemaVersion)
			}
			return a.printRiver(cmd, m)
		},
	}
}

func (a *app) migrateDownCommand() *cobra.Command {
	var (
		to  int64
		yes bool
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Roll back the newest migration (or down to --to)",
		Long: `down rolls back the newest applied migration, or every migration newer than
--to. Rolling back drops tables, and the messages in them: it asks for
confirmation unless --yes.`,
		Example: `  inboxctl migrate down
  inboxctl migrate down --to 0 --yes   # remove pgbox's tables entirely`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := a.migrator(cmd)
			if err != nil {
				return err
			}
			defer m.Close()
			current, err := m.Version(cmd.Context())
			if err != nil {
				return err
			}
			target := current - 1
			if cmd.Flags().Changed("to") {
				target = to
			}
			if target < 0 || target >= current {
				return fmt.Errorf("schema %q is at version %d: nothing to roll back to version %d", a.schema, current, max(target, 0))
			}
			question := fmt.Sprintf("Roll schema %q back from version %d to %d, dropping tables and their data?", a.schema, current, target)
			if current >= migrations.RiverSince && target < migrations.RiverSince {
				question = fmt.Sprintf("Roll schema %q back from version %d to %d (River's job tables included), dropping tables and their data?", a.schema, current, target)
			}
			if !yes {
				if err := a.confirm(cmd.Context(), question, "rolled back"); err != nil {
					return err
				}
			}
			done, err := m.DownTo(cmd.Context(), target)
			for _, r := range done {
				fmt.Fprintf(a.out, "rolled back %s\n", r.Name)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "schema %q is at version %d\n", a.schema, target)
			return nil
		},
	}
	cmd.Flags().Int64Var(&to, "to", 0, "roll back every migration newer than this version")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func (a *app) migrateStatusCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the migrations this build knows and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := a.migrator(cmd)
			if err != nil {
				return err
			}
			defer m.Close()
			st, err := m.Status(cmd.Context())
			if err != nil {
				return err
			}
			if output != formatTable {
				return writeList(a.out, output, st)
			}
			t := newTable(a.out)
			fmt.Fprintln(t, "VERSION\tMIGRATION\tAPPLIED (UTC)")
			for _, s := range st {
				applied := "pending"
				if s.Applied {
					applied = stamp(s.AppliedAt)
				}
				fmt.Fprintf(t, "%d\t%s\t%s\n", s.Version, s.Name, applied)
			}
			if err := t.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(a.out)
			return a.printRiver(cmd, m)
		},
	}
	outputFlag(cmd, &output, listOutput)
	return cmd
}

func (a *app) migrateVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the schema's migration version and the one this build needs",
		Long: `version prints the schema's migration version and the one this build needs, and
always exits 0 when it could read them; 'inboxctl migrate check' exits by
where the schema stands, for deploy pipelines.`,
		Example: `  inboxctl migrate version
  inboxctl migrate version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.schemaState(cmd)
			if err != nil {
				return err
			}
			if output == formatJSON {
				return writeJSON(a.out, st)
			}
			fmt.Fprintf(a.out, "schema %q is at version %d; this build needs %d\n", a.schema, st.Version, st.Want)
			return nil
		},
	}
	outputFlag(cmd, &output, documentOutput)
	return cmd
}

func (a *app) migrateCheckCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Exit 0 if the schema is at this build's version, non-zero if not (for deploy pipelines)",
		Long: fmt.Sprintf(`check compares the schema with this build, River's job tables included, and
exits with a code a deploy pipeline can act on. It changes nothing.

  %d  current: the schema is at the version this build needs
  %d  behind: an older version, or River's tables behind: run inboxctl migrate up
  %d  ahead: a newer version than this build knows: deploy a newer build
  %d  missing: the schema has no pgbox tables: run inboxctl migrate up
  %d  the check itself failed (the database unreachable, say)

It prints the same as 'migrate version', with the state ("state" in JSON).`,
			ExitOK, ExitSchemaBehind, ExitSchemaAhead, ExitSchemaMissing, ExitFailure),
		Example: `  inboxctl migrate check && deploy
  inboxctl migrate check -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.schemaState(cmd)
			if err != nil {
				return err
			}
			if output == formatJSON {
				if err := writeJSON(a.out, st); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(a.out, "schema %q is at version %d (River %d); this build needs %d (River %d): %s\n",
					a.schema, st.Version, st.RiverVersion, st.Want, st.RiverWant, st.State)
			}
			return st.err(a.schema)
		},
	}
	outputFlag(cmd, &output, documentOutput)
	return cmd
}

// Where a schema stands against this build, as migrate check reports it.
const (
	schemaCurrent = "current"
	schemaBehind  = "behind"
	schemaAhead   = "ahead"
	schemaMissing = "missing"
)

// schemaState is where a schema stands against this build: what migrate
// version and migrate check print.
type schemaState struct {
	// RiverVersion is the newest River migration applied (0: none).
	RiverVersion int `json:"river_version"`
	// RiverWant is the newest River migration this build carries.
	RiverWant int `json:"river_want"`
	// Schema is the schema's name.
	Schema string `json:"schema"`
	// State is current, behind, ahead or missing.
	State string `json:"state"`
	// Version is the schema's pgbox migration version (0: none).
	Version int64 `json:"version"`
	// Want is the version this build needs (pgbox.SchemaVersion).
	Want int64 `json:"want"`
}

// schemaState reads where the schema stands; it changes nothing.
func (a *app) schemaState(cmd *cobra.Command) (schemaState, error) {
	m, err := a.migrator(cmd)
	if err != nil {
		return schemaState{}, err
	}
	defer m.Close()
	st := schemaState{Schema: a.schema, Want: pgbox.SchemaVersion}
	if st.Version, err = m.Version(cmd.Context()); err != nil {
		return st, err
	}
	if st.RiverVersion, st.RiverWant, err = m.RiverVersion(cmd.Context()); err != nil {
		return st, err
	}
	switch {
	case st.Version == 0:
		st.State = schemaMissing
	case st.Version < st.Want, st.Version == st.Want && st.RiverVersion < st.RiverWant:
		st.State = schemaBehind
	case st.Version > st.Want, st.RiverVersion > st.RiverWant:
		st.State = schemaAhead
	default:
		st.State = schemaCurrent
	}
	return st, nil
}

// err is nil for a current schema, and otherwise the exit code for its
// state with what to do.
func (st schemaState) err(schema string) error {
	switch st.State {
	case schemaMissing:
		return &exitError{ExitSchemaMissing, fmt.Errorf("schema %q has no pgbox tables: run inboxctl migrate up", schema)}
	case schemaBehind:
		return &exitError{ExitSchemaBehind, fmt.Errorf("schema %q is behind this build: run inboxctl migrate up", schema)}
	case schemaAhead:
		return &exitError{ExitSchemaAhead, fmt.Errorf("schema %q is ahead of this build: deploy a newer build (or roll back with the newer build's inboxctl migrate down)", schema)}
	}
	return nil
}

// printRiver says where River's migrations stand: migration RiverSince
// installs River's tables, which package maintenance runs its jobs on.
func (a *app) printRiver(cmd *cobra.Command, m *migrations.Migrator) error {
	have, want, err := m.RiverVersion(cmd.Context())
	if err != nil {
		return err
	}
	switch {
	case have == 0:
		fmt.Fprintf(a.out, "River's job tables (for package maintenance): not installed; migration %d installs them\n", migrations.RiverSince)
	case have == want:
		fmt.Fprintf(a.out, "River's job tables (for package maintenance): at River migration %d, up to date\n", have)
	default:
		fmt.Fprintf(a.out, "River's job tables (for package maintenance): at River migration %d of %d: run inboxctl migrate up\n", have, want)
	}
	return nil
}
