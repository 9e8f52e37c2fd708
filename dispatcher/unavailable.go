package dispatcher

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/pgbox/pgbox/internal/backoff"
	"github.com/pgbox/pgbox/internal/telemetry"
)

// DefaultUnavailableBackoff waits about a second before the first probe of
// an event type whose handler reported its dependency unavailable, and
// doubles the wait after each probe that finds it still unavailable, up to
// 30 seconds, with jitter: a dependency that comes back is used again
// within 30 seconds.
func DefaultUnavailableBackoff(probe int) time.Duration {
	return backoff.Exponential(probe, time.Second, 30*time.Second)
}

// outages is what a dispatcher knows of its handlers' dependencies, by
// event type, in this process: each process finds an outage for itself.
//
// A handler that returns Unavailable puts its event type in an outage: no
// claim of this dispatcher takes the type's messages (see skip) until the
// backoff (Config.UnavailableBackoffFunc) has passed; then one claim takes
// them again, and the first of them its batch calls is the probe, the
// others being handed back uncalled. A probe that is Unavailable again
// backs the type off longer; any other outcome ends the outage, and claims
// take the type at full speed again. Each change is logged once: down,
// still down every remindEvery (a minute), up again.
//
// A call reports on the dependency as it was when the call began: a call
// that began before the type's state last changed (its epoch is not the
// current one) changes nothing, so that a call under way when the outage
// began cannot end it, and one of the calls in flight then cannot start it
// again.
type outages struct {
	backoffFunc func(probe int) time.Duration
	consumer    string
	logger      *slog.Logger
	remindEvery time.Duration
	tel         *telemetry.Dispatcher
	wake        func() // wakes an idle worker: an event type's messages may be claimed again

	mu     sync.Mutex
	byType map[string]*dependency // event types whose handler ever reported Unavailable
}

// dependency is the state of one event type's dependency.
type dependency struct {
	epoch   int       // counts the changes of state
	down    bool      // the handler reported it unavailable, and no probe has answered since
	err     error     // the last Unavailable error while down
	since   time.Time // when the outage began
	logged  time.Time // when it was last logged
	next    time.Time // when the next probe may be claimed
	probes  int       // calls found it down since the outage began: the first, then each probe
	probing *probe    // the batch holding the probe, if one does
}

// probe is a batch's right to call one handler of an event type that is
// down.
type probe struct{ used bool }

func newOutages(cfg Config, consumer string, tel *telemetry.Dispatcher, wake func()) *outages {
	return &outages{backoffFunc: cfg.UnavailableBackoffFunc, consumer: consumer, logger: cfg.Logger,
		remindEvery: time.Minute, tel: tel, wake: wake, byType: map[string]*dependency{}}
}

// skip returns the event types that a claim made at now must leave alone,
// added to skipped: those down and not due for a probe, or due but probed
// by another batch. The types it leaves out are due for a probe, which the
// claiming batch now holds (probes): call release with them once it is
// over.
func (o *outages) skip(now time.Time, skipped []string) ([]string, map[string]*probe) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var probes map[string]*probe
	for eventType, dep := range o.byType {
		switch {
		case !dep.down || slices.Contains(skipped, eventType):
		case dep.probing == nil && !now.Before(dep.next):
			if probes == nil {
				probes = map[string]*probe{}
			}
			dep.probing = &probe{}
			probes[eventType] = dep.probing
		default:
			skipped = append(skipped, eventType)
		}
	}
	return skipped, probes
}

// release gives back the probes a batch held and did not use up.
func (o *outages) release(probes map[string]*probe) {
	if len(probes) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for eventType, p := range probes {
		if dep := o.byType[eventType]; dep != nil && dep.probing == p {
			dep.probing = nil
		}
	}
}

// gate decides whether a handler of eventType may be called now, by a
// batch holding probes, and returns the epoch to report the call with: yes
// if the type's dependency is up, or if the batch holds the type's probe
// and has not used it yet (it now has).
func (o *outages) gate(eventType string, probes map[string]*probe) (epoch int, call bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	dep, p := o.byType[eventType], probes[eventType]
	switch {
	case !mayCall(dep, p):
		return 0, false
	case dep == nil:
		return 0, true
	case dep.down:
		p.used = true
	}
	return dep.epoch, true
}

// mayCall reports whether a batch holding probe p (nil if none) may call a
// handler whose dependency is dep (nil if never down): yes if it is up, or
// if p is its probe, unused.
func mayCall(dep *dependency, p *probe) bool {
	return dep == nil || !dep.down || (p != nil && dep.probing == p && !p.used)
}

// held returns the messages of cs that gate would not let a batch holding
// probes call now, without using up any probe.
func (o *outages) held(cs []*claimed, probes map[string]*probe) []*claimed {
	o.mu.Lock()
	defer o.mu.Unlock()
	var held []*claimed
	for _, c := range cs {
		if !mayCall(o.byType[c.msg.EventType], probes[c.msg.EventType]) {
			held = append(held, c)
		}
	}
	return held
}

// report takes the outcome of a call gated at epoch: err is what the
// handler returned.
func (o *outages) report(eventType string, epoch int, err error) {
	unavailable := asUnavailable(err)
	isUnavailable := unavailable != nil
	o.mu.Lock()
	defer o.mu.Unlock()
	dep := o.byType[eventType]
	if dep == nil {
		if !isUnavailable {
			return // the hot path: never down
		}
		dep = &dependency{}
		o.byType[eventType] = dep
	}
	if epoch != dep.epoch {
		return
	}
	now := time.Now()
	attrs := []any{slog.String("consumer", o.consumer), slog.String("event_type", eventType)}
	switch {
	case isUnavailable:
		dep.probes++
		dep.err, dep.probing = unavailable.Err, nil
		dep.next = now.Add(max(o.backoffFunc(dep.probes), 0))
		if !dep.down {
			dep.down, dep.since, dep.logged = true, now, now
			dep.epoch++
			o.tel.Unavailable(eventType, true)
			o.logger.Error("dispatcher: a handler reports its dependency unavailable; messages of its event type are not claimed, and charged no attempt, while it lasts: one is tried as a probe after each backoff",
				append(attrs, slog.Duration("probe_in", dep.next.Sub(now).Round(time.Millisecond)), slog.String("error", dep.err.Error()))...)
			return
		}
		if now.Sub(dep.logged) >= o.remindEvery {
			dep.logged = now
			o.logger.Error("dispatcher: a handler's dependency is still unavailable; messages of its event type are still not claimed",
				append(attrs, slog.Duration("down_for", now.Sub(dep.since).Round(time.Second)), slog.Int("probes", dep.probes), slog.String("error", dep.err.Error()))...)
		}
	case dep.down:
		o.logger.Info("dispatcher: a handler's dependency is available again; messages of its event type are claimed again",
			append(attrs, slog.Duration("down_for", now.Sub(dep.since).Round(time.Millisecond)), slog.Int("probes", dep.probes))...)
		*dep = dependency{epoch: dep.epoch + 1}
		o.tel.Unavailable(eventType, false)
		o.wake()
	}
}

// asUnavailable returns err's UnavailableError, or nil. It allocates
// nothing for a nil err, which is every successful call's: errors.As
// would move its target to the heap.
func asUnavailable(err error) *UnavailableError {
	if err == nil {
		return nil
	}
	var unavailable *UnavailableError
	if errors.As(err, &unavailable) {
		return unavailable
	}
	return nil
}

// down returns the event types whose dependency is down, in order.
func (o *outages) down() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var types []string
	for eventType, dep := range o.byType {
		if dep.down {
			types = append(types, eventType)
		}
	}
	slices.Sort(types)
	return types
}

// Err says which event types' dependencies are down, or returns nil.
func (o *outages) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	for _, eventType := range slices.Sorted(maps.Keys(o.byType)) {
		if dep := o.byType[eventType]; dep.down {
			errs = append(errs, fmt.Errorf("event type %q not claimed for %s: its handler reports its dependency unavailable (%d calls in a row, probes included; the next probe in %s): %w",
				eventType, time.Since(dep.since).Round(time.Second), dep.probes, max(time.Until(dep.next), 0).Round(time.Millisecond), dep.err))
		}
	}
	return errors.Join(errs...)
}
