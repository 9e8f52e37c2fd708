package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// pause is an operator's pause of the consumer (eventType "") or of one of
// its event types: a row of consumer_pauses.
type pause struct {
	eventType string
	pausedAt  time.Time
	pausedBy  string
	reason    string
}

// pauses is the dispatcher's view of its consumer's pauses, read from
// consumer_pauses at most once per PollInterval, by the first worker to
// claim after that long: every dispatcher of the consumer, in every
// process, stops claiming paused messages within about a poll interval of
// the row appearing, and resumes as soon after its deletion, without a
// round trip on every claim.
type pauses struct {
	mu      sync.Mutex
	byType  map[string]pause // by event type, "" for the whole consumer
	read    time.Time        // when byType was read
	reading bool             // a worker is reading it
}

// pausesSQL reads consumer $1's pauses.
const pausesSQL = `SELECT event_type, paused_at, paused_by, reason FROM /* schema */consumer_pauses WHERE consumer = $1`

// refreshPauses reads the consumer's pauses if they were last read a poll
// interval ago or more, and no other worker is reading them (until they
// have been read once, every worker reads them: none claims before it
// knows them), and logs each change once: a pause with who, when and why,
// a resume.
func (d *Dispatcher) refreshPauses(ctx context.Context) error {
	p := &d.pauses
	p.mu.Lock()
	if (p.reading && !p.read.IsZero()) || time.Since(p.read) < d.cfg.PollInterval {
		p.mu.Unlock()
		return nil
	}
	p.reading = true
	p.mu.Unlock()
	now, err := d.readPauses(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reading = false
	if err != nil {
		return fmt.Errorf("read the consumer's pauses: %w", err)
	}
	for _, eventType := range slices.Sorted(maps.Keys(now)) {
		if pa := now[eventType]; p.byType[eventType] != pa {
			d.tel.Paused(eventType, true)
			d.cfg.Logger.Warn("dispatcher: paused by an operator: "+pausedWhat(eventType)+" are not claimed until resumed (inboxctl resume); they keep arriving and wait as pending",
				slog.String("consumer", d.consumer), slog.String("event_type", eventType), slog.String("paused_by", pa.pausedBy),
				slog.String("reason", pa.reason), slog.Time("paused_at", pa.pausedAt))
		}
	}
	for _, eventType := range slices.Sorted(maps.Keys(p.byType)) {
		if _, ok := now[eventType]; !ok {
			d.tel.Paused(eventType, false)
			d.cfg.Logger.Info("dispatcher: resumed: "+pausedWhat(eventType)+" are claimed again",
				slog.String("consumer", d.consumer), slog.String("event_type", eventType))
		}
	}
	p.byType, p.read = now, time.Now()
	return nil
}

// readPauses reads the consumer's pauses from the database.
func (d *Dispatcher) readPauses(ctx context.Context) (map[string]pause, error) {
	ctx, cancel := context.WithTimeout(ctx, bookkeepingTimeout)
	defer cancel()
	rows, err := d.pool.Query(ctx, d.q.pauses, d.consumer)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byType := map[string]pause{}
	for rows.Next() {
		var pa pause
		if err := rows.Scan(&pa.eventType, &pa.pausedAt, &pa.pausedBy, &pa.reason); err != nil {
			return nil, err
		}
		byType[pa.eventType] = pa
	}
	return byType, rows.Err()
}

// pausedWhat names what a pause of eventType stops, for a log line.
func pausedWhat(eventType string) string {
	if eventType == "" {
		return "the consumer's messages"
	}
	return "messages of event type " + fmt.Sprintf("%q", eventType)
}

// paused reports whether the whole consumer is paused, and returns the
// paused event types otherwise.
func (p *pauses) paused() (whole bool, types []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byType[""]; ok {
		return true, nil
	}
	for eventType := range p.byType {
		types = append(types, eventType)
	}
	return false, types
}

// Err describes the pauses, or returns nil when there are none.
func (p *pauses) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, eventType := range slices.Sorted(maps.Keys(p.byType)) {
		pa := p.byType[eventType]
		errs = append(errs, fmt.Errorf("%s paused by %q since %s (%s ago), reason %q: not claimed until resumed",
			pausedWhat(eventType), pa.pausedBy, pa.pausedAt.UTC().Format(time.RFC3339), time.Since(pa.pausedAt).Round(time.Second), pa.reason))
	}
	return errors.Join(errs...)
}
