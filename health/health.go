// Package health is a health check a service can expose: is the database
// reachable, is pgbox's schema at this build's version, are the service's
// dispatchers, relays and maintenance running, and is each backlog's
// oldest claimable message younger than a threshold.
//
//	checker, _ := health.New(pool, health.Config{
//		Dispatchers: []*dispatcher.Dispatcher{payments},
//		Relays:      []*relay.Relay{r},
//		Maintainer:  m,
//	})
//	mux.Handle("GET /healthz", checker)
//
// The handler answers 200 when no check fails and 503 otherwise, with a
// JSON report of each check either way. A check that finds something that
// costs latency but not correctness warns instead of failing (status
// "warn", still 200): notifications that never reach a dispatcher or relay
// (a LISTEN through a transaction pooler) leave new work to wait for the
// next poll. A dispatcher or relay that cannot record its outcomes, and so
// has stopped claiming, fails, as does one that is stalled: it has had
// work due for its StallTimeout and finished none of it. A relay that has
// paused because its broker is unreachable, or has a topic whose publishes
// hang, warns: no message is lost or charged an attempt, and the stall and
// backlog checks fail once rows have waited too long. So does a dispatcher
// whose consumer, or one of its event types, an operator paused (who, when
// and why are in the check's error): a pause is a choice, not a fault, and
// must not get the process restarted; and one that claims no message of an
// event type because its handler reported its dependency unavailable
// (dispatcher.Unavailable). Use it for readiness and alerting.
// Think twice before using it as a liveness probe: a backlog that ages
// because a downstream system is slow, or a database that is down, is not
// cured by restarting the process.
package health

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/telemetry"
	"github.com/pgbox/pgbox/maintenance"
	"github.com/pgbox/pgbox/relay"
)

const (
	// BacklogAgeMaxDefault is the default Config.BacklogAgeMax.
	BacklogAgeMaxDefault = 5 * time.Minute
	// TimeoutDefault is the default Config.Timeout.
	TimeoutDefault = 5 * time.Second
)

// Check statuses.
const (
	// StatusOK means the check passed.
	StatusOK = "ok"
	// StatusFail means it did not; Check.Error says why.
	StatusFail = "fail"
	// StatusWarn means the check found something degraded that costs
	// latency, not correctness (notifications that do not arrive), so it
	// does not fail the report; Check.Error says why.
	StatusWarn = "warn"
)

// Config configures a Checker.
type Config struct {
	// BacklogAgeMax is how long the oldest claimable pending message of a
	// dispatcher's consumer (and, with Relays, the oldest publishable outbox
	// row) may have waited since it became due before the check fails. A
	// message backing off after a failure, or held behind a dead message of
	// its ordering key, does not count: it waits for time or for an operator,
	// not for a worker. Defaults to BacklogAgeMaxDefault (5 minutes); -1
	// checks no backlog.
	BacklogAgeMax time.Duration

	// Dispatchers must be running, recording their outcomes and not
	// stalled, and their consumers' backlogs young enough. Notifications that do not reach
	// one, an operator's pause, and a handler's dependency reported
	// unavailable only warn.
	Dispatchers []*dispatcher.Dispatcher

	// Maintainer, if set, must be running.
	Maintainer *maintenance.Maintainer

	// Relays must be running, recording their outcomes and not stalled,
	// and the outbox's backlog young enough. Notifications that do not
	// reach one, and a broker or topic that one cannot reach, only warn.
	Relays []*relay.Relay

	// Schema is the PostgreSQL schema holding pgbox's tables. Defaults to
	// pgbox.DefaultSchema.
	Schema string

	// Timeout bounds a whole check. Defaults to TimeoutDefault (5 seconds).
	Timeout time.Duration
}

// Checker checks a service's pgbox components. It is an http.Handler.
type Checker struct {
	cfg  Config
	pool *pgxpool.Pool
}

// New returns a Checker. It does not touch the database.
func New(pool *pgxpool.Pool, cfg Config) (*Checker, error) {
	if pool == nil {
		return nil, errors.New("health: pool is nil")
	}
	cfg.BacklogAgeMax = cmp.Or(cfg.BacklogAgeMax, BacklogAgeMaxDefault)
	cfg.Schema = cmp.Or(cfg.Schema, pgbox.DefaultSchema)
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	if err := ident.ValidateSchema(cfg.Schema); err != nil {
		return nil, fmt.Errorf("health: Config.Schema: %w", err)
	}
	if cfg.BacklogAgeMax < 0 && cfg.BacklogAgeMax != -1 {
		return nil, fmt.Errorf("health: Config.BacklogAgeMax is %s: use a positive duration, 0 for the default or -1 to check no backlog", cfg.BacklogAgeMax)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("health: Config.Timeout is %s: it must be positive", cfg.Timeout)
	}
	for i, d := range cfg.Dispatchers {
		if d == nil {
			return nil, fmt.Errorf("health: Config.Dispatchers[%d] is nil", i)
		}
	}
	for i, r := range cfg.Relays {
		if r == nil {
			return nil, fmt.Errorf("health: Config.Relays[%d] is nil", i)
		}
	}
	return &Checker{cfg: cfg, pool: pool}, nil
}

// CheckResult is the outcome of one check.
type CheckResult struct {
	// Detail says what was found, for a passing check too: "version 5",
	// "3 pending, the oldest due for 1.2s".
	Detail string `json:"detail,omitzero"`
	// Error says why a check failed.
	Error string `json:"error,omitzero"`
	// Name says what was checked: "database", "schema",
	// "dispatcher payments", "relay", "maintenance",
	// "notifications payments", "notifications relay", "broker relay",
	// "paused payments", "unavailable payments", "backlog payments",
	// "outbox".
	Name string `json:"name"`
	// Status is StatusOK, StatusWarn or StatusFail.
	Status string `json:"status"`
}

// Report is the outcome of a health check.
type Report struct {
	// Checks are the individual checks, in a fixed order.
	Checks []CheckResult `json:"checks"`
	// Status is StatusFail when a check failed, StatusWarn when none failed
	// but one warned, and StatusOK otherwise.
	Status string `json:"status"`
}

// Healthy reports whether no check failed: a warning is healthy.
func (r *Report) Healthy() bool { return r.Status != StatusFail }

// Check runs every check, within Config.Timeout, and reports them all.
func (c *Checker) Check(ctx context.Context) *Report {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	rep := &Report{Status: StatusOK}
	add := func(name, detail string, err error) {
		r := CheckResult{Name: name, Detail: detail, Status: StatusOK}
		if err != nil {
			r.Status, r.Error = StatusFail, err.Error()
			rep.Status = StatusFail
		}
		rep.Checks = append(rep.Checks, r)
	}

	dbErr := c.pool.Ping(ctx)
	add("database", "", dbErr)
	unreachable := errors.New("database unreachable")
	if dbErr != nil {
		add("schema", "", unreachable)
	} else if err := pgbox.CheckSchema(ctx, c.pool, c.cfg.Schema); err != nil {
		add("schema", "", err)
	} else if err := pgbox.CheckPartitioning(ctx, c.pool, c.cfg.Schema); err != nil {
		add("schema", "", err)
	} else {
		add("schema", "version "+strconv.Itoa(pgbox.SchemaVersion), nil)
	}

	warn := func(name string, err error) {
		r := CheckResult{Name: name, Status: StatusOK}
		if err != nil {
			r.Status, r.Error = StatusWarn, err.Error()
			if rep.Status == StatusOK {
				rep.Status = StatusWarn
			}
		}
		rep.Checks = append(rep.Checks, r)
	}

	// A component that runs but has stopped claiming because it cannot
	// record its outcomes, or has work and finishes none of it, is as good
	// as stopped.
	running := func(name string, ok bool, troubles ...error) {
		if !ok {
			add(name, "", errors.New("not running"))
			return
		}
		if err := errors.Join(troubles...); err != nil {
			add(name, "", err)
			return
		}
		add(name, "running", nil)
	}
	relayName := func(i int) string {
		if len(c.cfg.Relays) > 1 {
			return "relay " + strconv.Itoa(i+1)
		}
		return "relay"
	}
	for _, d := range c.cfg.Dispatchers {
		running("dispatcher "+d.Consumer(), d.Running(), d.RecordErr(), d.StallErr())
	}
	for i, r := range c.cfg.Relays {
		running(relayName(i), r.Running(), r.RecordErr(), r.StallErr())
	}
	if c.cfg.Maintainer != nil {
		running("maintenance", c.cfg.Maintainer.Running())
	}
	for _, d := range c.cfg.Dispatchers {
		warn("notifications "+d.Consumer(), d.NotifyErr())
	}
	for i, r := range c.cfg.Relays {
		warn("notifications "+relayName(i), r.NotifyErr())
	}
	for i, r := range c.cfg.Relays {
		warn("broker "+relayName(i), r.BrokerErr())
	}
	for _, d := range c.cfg.Dispatchers {
		warn("paused "+d.Consumer(), d.PauseErr())
		warn("unavailable "+d.Consumer(), d.UnavailableErr())
	}

	if c.cfg.BacklogAgeMax < 0 {
		return rep
	}
	backlog := func(name string, read func() (int64, time.Duration, error)) {
		if dbErr != nil {
			add(name, "", unreachable)
			return
		}
		n, age, err := read()
		switch {
		case err != nil:
			add(name, "", err)
		case age > c.cfg.BacklogAgeMax:
			add(name, "", fmt.Errorf("%d pending, the oldest due for %s, over the %s allowed", n, age.Round(time.Millisecond), c.cfg.BacklogAgeMax))
		default:
			add(name, fmt.Sprintf("%d pending, the oldest due for %s", n, age.Round(time.Millisecond)), nil)
		}
	}
	seen := map[string]bool{}
	for _, d := range c.cfg.Dispatchers {
		if consumer := d.Consumer(); !seen[consumer] {
			seen[consumer] = true
			backlog("backlog "+consumer, func() (int64, time.Duration, error) {
				return telemetry.ReadInboxBacklog(ctx, c.pool, c.cfg.Schema, consumer)
			})
		}
	}
	if len(c.cfg.Relays) > 0 {
		backlog("outbox", func() (int64, time.Duration, error) {
			return telemetry.ReadOutboxBacklog(ctx, c.pool, c.cfg.Schema)
		})
	}
	return rep
}

// ServeHTTP answers with the report as JSON: 200 when healthy, 503
// otherwise.
func (c *Checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rep := c.Check(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if rep.Healthy() {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if r.Method == http.MethodHead {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
}
