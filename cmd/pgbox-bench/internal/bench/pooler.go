package bench

import (
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// poolerMode is the pgx query mode the pooled cases use: a transaction
// pooler hands each transaction a server connection of its own, so
// statements cannot be prepared on one and used on another
// (docs/operations.md, Deployment shapes).
const poolerMode = "cache_describe"

// pooled returns an env whose rigs connect through the pooler at
// poolerURL in poolerMode, and whose dispatchers and relays LISTEN on a
// direct connection to e's database, as docs/operations.md tells a
// deployment behind a transaction pooler to.
func (e *env) pooled(poolerURL string) (*env, error) {
	u, err := url.Parse(poolerURL)
	if err != nil {
		return nil, fmt.Errorf("pooler URL: %w", err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", poolerMode)
	u.RawQuery = q.Encode()
	listen, err := pgx.ParseConfig(e.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	p := *e
	p.cfg.URL = u.String()
	p.listen = listen
	return &p, nil
}

// pollOnlyRate is the rate of the poll-only latency cases: low enough that
// the workers are idle between messages, so each message waits for a
// worker's next poll (up to PollInterval) as it does in a quiet service.
// At 1,000/s busy workers claim again at once and the poll barely shows.
const pollOnlyRate = 50

// polling returns an env like e whose dispatchers and relays are
// poll-only: no LISTEN anywhere, new work found by polling at the default
// PollInterval, as behind a transaction pooler without a direct connection.
func (e *env) polling() *env {
	p := *e
	p.listen = nil
	p.pollOnly = true
	return &p
}

// poolerCases measures the hot paths on a direct connection and through
// the transaction pooler, side by side; then, at pollOnlyRate, the latency
// of the poll-only shape through the pooler against the pooler with a
// direct LISTEN connection and against a direct connection.
func (e *env) poolerCases() ([]benchCase, error) {
	p, err := e.pooled(e.cfg.PoolerURL)
	if err != nil {
		return nil, err
	}
	cfg := e.cfg
	side := func(setting, unit string, higherBetter bool, run func(e *env) runFunc) benchCase {
		return benchCase{scenario: "pooler", setting: setting, main: unit, higherBetter: higherBetter,
			systems: []system{{"PgBouncer", run(p)}, {"direct", run(e)}}}
	}
	polled := func(setting string, run func(e *env) runFunc) benchCase {
		return benchCase{scenario: "pooler", setting: setting + ", poll-only", main: "p99 ms",
			systems: []system{{"poll-only", run(p.polling())}, {"PgBouncer", run(p)}, {"direct", run(e)}}}
	}
	return []benchCase{
		side("Receive, 16 conns", "msgs/s", true, func(e *env) runFunc { return e.pgboxIngest(16, 1) }),
		side("ReceiveBatch 100", "msgs/s", true, func(e *env) runFunc { return e.pgboxIngest(4, 100) }),
		side(fmt.Sprintf("drain %d messages", cfg.Backlog), "msgs/s", true, func(e *env) runFunc { return e.pgboxDrain(cfg.Backlog, cfg.Workers) }),
		side(fmt.Sprintf("relay %d rows → GoChannel", cfg.Backlog/4), "msgs/s", true, func(e *env) runFunc { return e.relayDrain(cfg.Backlog/4, goChannel, relayShape{atomic: true}) }),
		side(fmt.Sprintf("latency, inbox, %d/s", cfg.Rate), "p99 ms", false, func(e *env) runFunc { return e.inboxLatency(cfg.Rate) }),
		side(fmt.Sprintf("latency, outbox → relay → inbox, %d/s", cfg.Rate), "p99 ms", false, func(e *env) runFunc { return e.endToEndLatency(cfg.Rate) }),
		polled(fmt.Sprintf("latency, inbox, %d/s", pollOnlyRate), func(e *env) runFunc { return e.inboxLatency(pollOnlyRate) }),
		polled(fmt.Sprintf("latency, outbox → relay → inbox, %d/s", pollOnlyRate), func(e *env) runFunc { return e.endToEndLatency(pollOnlyRate) }),
	}, nil
}
