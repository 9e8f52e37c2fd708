package console

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/pgbox/pgbox/admin"
)

// Target is one database schema the console shows: an admin.Admin and the
// name the switcher gives it.
type Target struct {
	// Admin reads and steers the target's schema. Required.
	Admin *admin.Admin

	// Name names the target in the switcher and in URLs (?db=NAME).
	// Required, and unique among a Console's targets.
	Name string

	// Where says where the target is, for people: host, port, database
	// and schema, never a password. Defaults to the schema's name.
	Where string

	throughput *throughput
}

// Config configures a Console.
type Config struct {
	// Actor is who acts when no credentials are configured (a console on
	// loopback run by the engineer using it): the audit log records this
	// name, from the request's remote address. Defaults to ActorDefault.
	Actor string

	// Credentials, if set, are required of every request. Defaults to
	// none: run such a console on loopback, or ReadOnly.
	Credentials Credentials

	// Logger receives one line per action and per failed request. It never
	// sees a payload, and error texts pass through Redact first. Defaults
	// to a logger that discards everything.
	Logger *slog.Logger

	// ReadOnly refuses every action: the pages show no action forms, and a
	// POST is answered 403. Defaults to false.
	ReadOnly bool

	// Redact removes secrets (a connection string's password) from an
	// error text before it is shown or logged. Defaults to leaving texts
	// as they are.
	Redact func(string) string

	// Targets are the schemas to show, the first by default. Required.
	Targets []Target
}

// Console is the web console: an http.Handler. Close it to stop the
// background actions it started.
type Console struct {
	cfg     Config
	csrfKey []byte
	jobs    *jobs
	mux     *http.ServeMux
	pages   pages
	targets map[string]*Target
}

// ActorDefault is Config.Actor's default: who acts on a console without
// credentials, when its caller names no one.
const ActorDefault = "console"

// withDefaults returns cfg with its defaults filled in, and a copy of
// Targets of its own, which New then gives each target's state.
func (cfg Config) withDefaults() Config {
	cfg.Actor = cmp.Or(cfg.Actor, ActorDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Redact == nil {
		cfg.Redact = func(s string) string { return s }
	}
	cfg.Targets = slices.Clone(cfg.Targets)
	for i := range cfg.Targets {
		if t := &cfg.Targets[i]; t.Where == "" && t.Admin != nil {
			t.Where = "schema " + t.Admin.Schema()
		}
	}
	return cfg
}

// validate reports what is wrong with cfg, naming the field.
func (cfg Config) validate() error {
	if len(cfg.Targets) == 0 {
		return errors.New("console: Config.Targets is empty: give at least one schema to show")
	}
	names := map[string]bool{}
	for i, t := range cfg.Targets {
		switch {
		case t.Admin == nil:
			return fmt.Errorf("console: Config.Targets[%d] (%q) has no Admin", i, t.Name)
		case t.Name == "" || strings.ContainsAny(t.Name, "\x00\r\n"):
			return fmt.Errorf("console: Config.Targets[%d] has no usable Name: give each target a name for the switcher", i)
		case names[t.Name]:
			return fmt.Errorf("console: two targets are named %q: give each a name of its own", t.Name)
		}
		names[t.Name] = true
	}
	return cfg.Credentials.validate()
}

// New returns a Console for cfg, or an error naming what is wrong with it.
func New(cfg Config) (*Console, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, csrfKey: make([]byte, 32), pages: pages, targets: map[string]*Target{}}
	rand.Read(c.csrfKey) // never fails: it crashes the program first
	for i := range c.cfg.Targets {
		t := &c.cfg.Targets[i]
		t.throughput = &throughput{}
		c.targets[t.Name] = t
	}
	c.jobs = newJobs(c.logJobEnded)
	c.mux = c.newMux()
	return c, nil
}

// ServeHTTP serves the console. Every response, a refusal or the mux's
// own 404 and 405 included, carries the security headers; without
// credentials, every request must name a trusted host (refuseHost).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	if c.refuseHost(w, r) {
		return
	}
	c.mux.ServeHTTP(w, r)
}

// Close stops the background actions the console started: it starts no
// new one, lets each finish its batch under way and stops it there (its
// audit record says how far it got), and waits for them until ctx ends.
// Then it cancels the batches still in flight, waits for them to return,
// and says so in its error. Call it once the http.Server has shut down;
// it may be called more than once.
func (c *Console) Close(ctx context.Context) error {
	return c.jobs.close(ctx)
}
