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
	cmd.AddCommand(a.migrateUpCommand(), a.migrateDownCommand(), a.migrateStatusCommand(), a.migrateVersionCommand())
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
			if !yes && !a.confirm(question) {
				return fmt.Errorf("not confirmed: nothing was rolled back")
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
			if output == formatJSON {
				return writeJSON(a.out, st)
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
	outputFlag(cmd, &output, formatTable, formatJSON)
	return cmd
}

func (a *app) migrateVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the schema's migration version and the one this build needs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := a.migrator(cmd)
			if err != nil {
				return err
			}
			defer m.Close()
			v, err := m.Version(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "schema %q is at version %d; this build needs %d\n", a.schema, v, pgbox.SchemaVersion)
			return nil
		},
	}
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
