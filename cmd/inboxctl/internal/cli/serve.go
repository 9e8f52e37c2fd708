package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/cmd/inboxctl/internal/console"
)

// The environment variables serve reads its credentials from when no flag
// gives them.
const (
	envToken     = "INBOXCTL_TOKEN"
	envBasicAuth = "INBOXCTL_BASIC_AUTH"
)

// serveShutdown is how long serve waits, once interrupted, for requests in
// flight and background actions to end their batch.
const serveShutdown = 10 * time.Second

// serveFlags are serve's flags.
type serveFlags struct {
	addr                     string
	basicAuth, basicAuthFile string
	readOnly                 bool
	targets                  []string
	token, tokenFile         string
}

func (a *app) serveCommand() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the web console: overview, failures, messages, replays, in a browser",
		Long: `serve runs the web console on --addr: per consumer, messages by status, the
oldest pending message's age and the last hour's throughput; failures grouped
by cause with their trend; a group's messages; one message in full; the outbox;
scheduled replays with their progress; the audit log. From it an operator
replays or discards a group or a selection (each shows its dry-run count and
asks for confirmation), schedules or throttles a replay, cancels one, and
retries dead outbox rows, through the same admin code as these commands, each
recorded in the audit log as the signed-in user, from the browser's address.

The database is --dsn (or DATABASE_URL) with --schema. --target adds another
schema, on that database or another one, to a switcher at the top:
  --target name=billing,schema=billing                     another schema, same database
  --target name=orders,dsn-env=ORDERS_DATABASE_URL          another database, its DSN in that variable
  --target name=orders,dsn-file=/run/secrets/orders-dsn,schema=pgbox

Credentials: a token (--token-file, $` + envToken + `, or --token), given as the
password of the browser's sign-in under your own name, or as a bearer token;
and/or a user and password (--basic-auth-file holding user:password,
$` + envBasicAuth + `, or --basic-auth). With credentials every page needs
them. Without, serve listens only on a loopback address (127.0.0.1, the
default) unless --read-only: it refuses to offer actions to other machines
unauthenticated. --read-only shows everything and changes nothing.

Stop it with Ctrl-C: background replays stop after their batch under way, and
their audit records say how far they got.`,
		Example: `  inboxctl serve
  inboxctl serve --addr 127.0.0.1:8080 --schema payments
  INBOXCTL_TOKEN=$(cat /run/secrets/console-token) inboxctl serve --addr :8080
  inboxctl serve --addr :8080 --read-only
  inboxctl serve --target name=orders,dsn-env=ORDERS_DATABASE_URL --target name=billing,schema=billing`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.serve(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	fl.BoolVar(&f.readOnly, "read-only", false, "show everything, change nothing: no action is offered or accepted")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the token every request must carry (default: $"+envToken+")")
	fl.StringVar(&f.token, "token", "", "the token itself (visible to other users in ps: prefer --token-file)")
	fl.StringVar(&f.basicAuthFile, "basic-auth-file", "", "file holding user:password for sign-in (default: $"+envBasicAuth+")")
	fl.StringVar(&f.basicAuth, "basic-auth", "", "user:password itself (visible in ps: prefer --basic-auth-file)")
	fl.StringArrayVar(&f.targets, "target", nil, "another schema to show: name=N[,schema=S][,dsn-env=VAR|dsn-file=PATH] (repeatable)")
	return cmd
}

// serve runs the console until ctx ends.
func (a *app) serve(ctx context.Context, f serveFlags) error {
	creds, err := a.credentials(f)
	if err != nil {
		return err
	}
	specs, err := parseTargets(f.targets)
	if err != nil {
		return err
	}
	cfg := console.Config{Actor: a.actor().Name, Credentials: creds, ReadOnly: f.readOnly,
		Logger: slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if err := console.Exposure(f.addr, cfg); err != nil {
		return usagef("--addr %s: %v", f.addr, err)
	}
	apps, err := a.connectTargets(ctx, specs)
	defer func() {
		for _, sub := range apps[1:] {
			sub.close()
		}
	}()
	if err != nil {
		return err
	}
	for i, spec := range specs {
		sub := apps[i]
		where := fmt.Sprintf("%s, schema %s", where(sub.pool.Config()), spec.schema)
		cfg.Targets = append(cfg.Targets, console.Target{Admin: sub.admin, Name: spec.name, Where: where})
	}
	cfg.Redact = func(s string) string {
		for _, sub := range apps {
			s = sub.redact(s)
		}
		return s
	}
	c, err := console.New(cfg)
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", f.addr)
	if err != nil {
		return fmt.Errorf("cannot listen on --addr %s: %w (is another console running there? pick another --addr)", f.addr, err)
	}
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	mode := "actions enabled"
	switch {
	case f.readOnly:
		mode = "read-only"
	case creds == (console.Credentials{}):
		mode = "actions enabled, no credentials: loopback only"
	}
	fmt.Fprintf(a.out, "inboxctl console on http://%s/ (%s; %s). Ctrl-C stops it.\n", ln.Addr(), mode, plural(int64(len(cfg.Targets)), "target"))

	select {
	case err = <-served:
		err = fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	return errors.Join(err, stopServing(ctx, srv, c))
}

// stopServing stops srv, then the console's background actions, within
// serveShutdown in all: requests in flight end first (and no new one
// comes), then each background action stops after its batch under way.
func stopServing(ctx context.Context, srv *http.Server, c *console.Console) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serveShutdown)
	defer cancel()
	if err := errors.Join(srv.Shutdown(ctx), c.Close(ctx)); err != nil {
		return fmt.Errorf("console: stop: %w", err)
	}
	return nil
}

// targetSpec is one schema serve shows: its name, schema, and the DSN
// (empty for the main database).
type targetSpec struct {
	dsn, name, schema string
}

// parseTargets reads the --target flags, after the main target: --dsn (or
// DATABASE_URL) with --schema.
func parseTargets(flags []string) ([]targetSpec, error) {
	specs := []targetSpec{{name: "", schema: ""}} // the main one: named once connected
	for _, flag := range flags {
		spec := targetSpec{schema: pgbox.DefaultSchema}
		var dsnEnv, dsnFile string
		for part := range strings.SplitSeq(flag, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || v == "" {
				return nil, usagef("--target %q: %q is not key=value (keys: name, schema, dsn-env, dsn-file)", flag, part)
			}
			switch k {
			case "name":
				spec.name = v
			case "schema":
				spec.schema = v
			case "dsn-env":
				dsnEnv = v
			case "dsn-file":
				dsnFile = v
			default:
				return nil, usagef("--target %q: unknown key %q (keys: name, schema, dsn-env, dsn-file; a DSN never goes on the command line)", flag, k)
			}
		}
		switch {
		case spec.name == "":
			return nil, usagef("--target %q has no name=…: the switcher and URLs need one", flag)
		case dsnEnv != "" && dsnFile != "":
			return nil, usagef("--target %q: give dsn-env or dsn-file, not both", flag)
		case dsnEnv != "":
			spec.dsn = "env:" + dsnEnv
		case dsnFile != "":
			spec.dsn = "file:" + dsnFile
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// connectTargets connects each target, the main one (this app) first, each
// other one as an app of its own, through connect, and checks nothing of
// their schemas: a page says what is wrong with one. It returns the apps
// connected, also when one fails, so that the caller closes them.
func (a *app) connectTargets(ctx context.Context, specs []targetSpec) ([]*app, error) {
	apps := []*app{a}
	if err := a.connect(ctx); err != nil {
		return apps, err
	}
	specs[0].schema = a.schema
	specs[0].name = a.pool.Config().ConnConfig.Database + "/" + a.schema
	names := map[string]bool{specs[0].name: true}
	for i := range specs[1:] {
		spec := &specs[i+1]
		if names[spec.name] {
			return apps, usagef("two targets are named %q: give each --target a name of its own", spec.name)
		}
		names[spec.name] = true
		sub := &app{as: a.as, dsn: a.dsn, errOut: a.errOut, getenv: a.getenv, in: a.in, now: a.now, out: a.out, schema: spec.schema}
		if spec.dsn != "" {
			dsn, err := readDSN(spec.dsn, a.getenv)
			if err != nil {
				return apps, usagef("--target name=%s: %v", spec.name, err)
			}
			sub.dsn = dsn
		}
		apps = append(apps, sub)
		if err := sub.connect(ctx); err != nil {
			return apps, fmt.Errorf("--target name=%s: %s", spec.name, sub.redact(err.Error()))
		}
	}
	return apps, nil
}

// readDSN reads a target's DSN from "env:VAR" or "file:PATH".
func readDSN(source string, getenv func(string) string) (string, error) {
	kind, name, _ := strings.Cut(source, ":")
	if kind == "env" {
		if dsn := getenv(name); dsn != "" {
			return dsn, nil
		}
		return "", fmt.Errorf("$%s is empty or unset: it should hold the database's connection string", name)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("cannot read the DSN file: %w", err)
	}
	if dsn := strings.TrimSpace(string(b)); dsn != "" {
		return dsn, nil
	}
	return "", fmt.Errorf("%s is empty: it should hold the database's connection string", name)
}

// credentials reads the console's credentials from the flags, the files
// they name, or the environment, and refuses two sources of one secret.
func (a *app) credentials(f serveFlags) (console.Credentials, error) {
	var creds console.Credentials
	token, err := secret("--token", f.token, "--token-file", f.tokenFile, envToken, a.getenv)
	if err != nil {
		return creds, err
	}
	basic, err := secret("--basic-auth", f.basicAuth, "--basic-auth-file", f.basicAuthFile, envBasicAuth, a.getenv)
	if err != nil {
		return creds, err
	}
	creds.Token = token
	if basic != "" {
		user, password, ok := strings.Cut(basic, ":")
		if !ok || user == "" || password == "" {
			return creds, usagef("basic auth credentials must be user:password, both non-empty")
		}
		creds.User, creds.Password = user, password
	}
	return creds, nil
}

// secret reads one secret from its flag, its file flag or its environment
// variable, in that order of precedence; giving both flags is an error.
func secret(flag, value, fileFlag, path, env string, getenv func(string) string) (string, error) {
	switch {
	case value != "" && path != "":
		return "", usagef("give %s or %s, not both", flag, fileFlag)
	case value != "":
		return value, nil
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return "", usagef("%s: %v", fileFlag, err)
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", usagef("%s %s is empty", fileFlag, path)
		}
		return s, nil
	}
	return strings.TrimSpace(getenv(env)), nil
}
