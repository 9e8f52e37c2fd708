// Package cli is inboxctl: every command, its flags, its output and its
// exit codes. Run is the whole program; main only wires it to the process,
// so tests drive it with buffers.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// usageError is a mistake on the command line.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// app is one run of inboxctl: its streams and, once connected, its admin.
type app struct {
	admin  *admin.Admin
	as     string
	dsn    string
	errOut io.Writer
	// finished is set when a bulk change interrupted during its last
	// batch was complete nonetheless: the run is no interrupted one.
	finished bool
	getenv   func(string) string
	in       io.Reader
	now      func() time.Time
	out      io.Writer
	pool     *pgxpool.Pool
	schema   string
}

// Run executes inboxctl with args and returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, args, stdin, stdout, stderr, os.Getenv)
}

// run is Run with the environment given, for tests.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{in: stdin, out: stdout, errOut: stderr, getenv: getenv, now: time.Now}
	defer a.close()
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if ctx.Err() != nil && !a.finished {
		return a.interrupted(err)
	}
	if err == nil {
		return ExitOK
	}
	err = pooledStatementError(a.dsn, err)
	fmt.Fprintln(stderr, "inboxctl: "+cleanBlock(a.redact(err.Error())))
	var (
		usage usageError
		exit  *exitError
	)
	switch {
	case errors.As(err, &exit):
		return exit.code
	case errors.As(err, &usage), errors.Is(err, admin.ErrInvalidPattern), strings.HasPrefix(err.Error(), "unknown command"): // cobra's own
		fmt.Fprintln(stderr, "Run 'inboxctl --help' (or add --help to the command) for usage.")
		return ExitUsage
	case errors.Is(err, admin.ErrNotFound):
		return ExitNotFound
	default:
		return ExitFailure
	}
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "inboxctl",
		Short: "Inspect and steer pgbox's inbox and outbox",
		Long: `inboxctl shows what pgbox's inbox and outbox hold and lets an operator replay,
discard or purge messages, safely: bulk changes ask for confirmation (or --yes)
and run in bounded batches. pause and resume hold a consumer's messages, or one
event type's, while what they need is down.

The database comes from --dsn or DATABASE_URL; the schema from --schema.
Commands that print data take -o table (the default), json, and jsonl
where the output is a list.

` + exitCodesHelp(),
		Example: `  inboxctl stats
  inboxctl failures
  inboxctl list --status dead --consumer payments
  inboxctl show order-17/placed --consumer payments
  inboxctl replay --group 3f2a9c1d0b7e --yes`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       readBuildInfo().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVar(&a.dsn, "dsn", "", "PostgreSQL connection string (default: $DATABASE_URL)")
	root.PersistentFlags().StringVar(&a.schema, "schema", pgbox.DefaultSchema, "schema holding pgbox's tables")
	root.PersistentFlags().StringVar(&a.as, "as", "", "who you are, in the audit log (default: your OS user)")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{suggestFlag(cmd, err)} })
	root.AddCommand(
		a.statsCommand(), a.listCommand(), a.showCommand(), a.failuresCommand(),
		a.replayCommand(), a.scheduledCommand(), a.discardCommand(), a.purgeCommand(),
		a.outboxCommand(), a.migrateCommand(), a.versionCommand(),
		a.processesCommand(), a.auditCommand(), a.serveCommand(),
	)
	root.AddCommand(a.pauseCommand(), a.resumeCommand(), a.pausesCommand())
	for _, c := range root.Commands() {
		wrapArgs(c)
	}
	return root
}

// interrupted ends a run whose context was cancelled (Ctrl-C, SIGINT,
// SIGTERM): with ExitInterrupted, whatever the command returned, saying
// so unless the command ended quietly (stats --watch) or already said
// what the interruption left.
func (a *app) interrupted(err error) int {
	switch {
	case err == nil:
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(a.errOut, "inboxctl: "+cleanBlock(a.redact(err.Error())))
	default:
		fmt.Fprintln(a.errOut, "inboxctl: interrupted: "+cleanBlock(a.redact(err.Error())))
	}
	return ExitInterrupted
}

// wrapArgs makes cobra's argument-count errors usage errors, in c and its
// subcommands.
func wrapArgs(c *cobra.Command) {
	if validate := c.Args; validate != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := validate(cmd, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}

// urlScheme matches a URL's scheme (RFC 3986).
var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// dsnForm refuses a database address of neither form pgx takes with a
// message that says what the forms are: pgx's own, for a misspelt scheme
// or a bare host:port, is about key=value parsing and masks part of the
// text as if it were a password. Only the scheme is quoted back.
func dsnForm(dsn string) error {
	const forms = "use a URL, postgres://USER@HOST:PORT/DATABASE, or key=value settings, host=HOST port=PORT user=USER dbname=DATABASE"
	scheme, _, isURL := strings.Cut(dsn, "://")
	isURL = isURL && urlScheme.MatchString(scheme) // not key=value settings with "://" in a value
	switch {
	case isURL && scheme != "postgres" && scheme != "postgresql":
		return usagef("--dsn (or DATABASE_URL) is a URL of scheme %q, not postgres: %s", clean(scheme), forms)
	case !isURL && !strings.Contains(dsn, "="):
		return usagef("--dsn (or DATABASE_URL) is neither a URL nor key=value settings: %s", forms)
	}
	return nil
}

// connect opens the pool, without checking the schema.
func (a *app) connect(ctx context.Context) error {
	if a.dsn == "" {
		a.dsn = a.getenv("DATABASE_URL")
	}
	if a.dsn == "" {
		return usagef("no database: pass --dsn or set DATABASE_URL")
	}
	if err := dsnForm(a.dsn); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(a.dsn)
	if err != nil {
		return usagef("invalid --dsn (or DATABASE_URL): %v", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "inboxctl"
	cfg.MaxConns = 4
	a.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if err := a.pool.Ping(ctx); err != nil {
		if ctx.Err() != nil {
			return err // interrupted: no advice needed
		}
		return connectError(cfg, err)
	}
	a.admin, err = newAdmin(a.pool, a.schema)
	if err != nil {
		return usageError{err}
	}
	return nil
}

// newAdmin is admin.New for --schema. admin names the field it rejects
// (Config.Schema), which means nothing on the command line, so the message
// is the one inboxctl has always printed: "admin: " and the reason.
func newAdmin(pool *pgxpool.Pool, schema string) (*admin.Admin, error) {
	adm, err := admin.New(pool, admin.Config{Schema: schema})
	if err != nil {
		if reason := errors.Unwrap(err); reason != nil {
			return nil, fmt.Errorf("admin: %w", reason)
		}
		return nil, err
	}
	return adm, nil
}

// open connects and checks that the schema is migrated to this build's
// version, with the command to run if not.
func (a *app) open(ctx context.Context) error {
	if err := a.connect(ctx); err != nil {
		return err
	}
	if err := a.admin.Check(ctx); isNotMigrated(err) {
		return a.schemaNotMigrated(ctx, err)
	} else if err != nil {
		return err
	}
	return nil
}

func (a *app) close() {
	if a.pool != nil {
		a.pool.Close()
	}
}

// where names the server a config points at, without its password.
func where(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("%s:%d (database %s, user %s)", c.Host, c.Port, c.Database, c.User)
}

// redact removes the connection's password from s, in plain and URL-encoded
// forms, so that no error message ever prints it.
func (a *app) redact(s string) string {
	dsn := a.dsn
	if dsn == "" {
		dsn = a.getenv("DATABASE_URL")
	}
	if dsn == "" {
		return s
	}
	var secrets []string
	if cfg, err := pgxpool.ParseConfig(dsn); err == nil && cfg.ConnConfig.Password != "" {
		p := cfg.ConnConfig.Password
		secrets = append(secrets, url.QueryEscape(p), url.PathEscape(p), p)
	}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			secrets = append(secrets, url.QueryEscape(p), url.PathEscape(p), p)
		}
	}
	for _, secret := range secrets {
		s = strings.ReplaceAll(s, secret, "*****")
	}
	return s
}

// suggestFlag adds the flag of cmd (its own or inherited) that a
// misspelt one most likely meant to err when err is pflag's "unknown
// flag: --consumr", as cobra suggests a misspelt command: "did you mean
// --consumer?". The one flag the typed name begins (--dry: --dry-run),
// or else the nearest flag within a third of the name's length in edits.
// A name of two letters or less, or unlike any flag, gets no guess: a
// wrong guess (--dsn for --dry) sends the reader further astray than none.
func suggestFlag(cmd *cobra.Command, err error) error {
	typed, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok || len(typed) <= 2 {
		return err
	}
	typed, _, _ = strings.Cut(typed, "=")
	var names, extending []string
	add := func(f *pflag.Flag) {
		names = append(names, f.Name)
		if strings.HasPrefix(f.Name, typed) {
			extending = append(extending, f.Name)
		}
	}
	cmd.Flags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	switch {
	case len(extending) == 1:
		return fmt.Errorf("%w (did you mean --%s?)", err, extending[0])
	case len(extending) > 1 || len(names) == 0:
		return err
	}
	if guess := nearest(typed, names)[0]; distance(typed, guess) <= max(1, len(typed)/3) {
		return fmt.Errorf("%w (did you mean --%s?)", err, guess)
	}
	return err
}
