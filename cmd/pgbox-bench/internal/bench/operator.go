package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/partition"
)

// operatorSchema holds the operator scenario's inbox: the retained
// scenario's inbox of OperatorRows UUIDv7 messages, kept between runs of
// the bench (filling 50 million rows takes minutes), with the failures
// below added once.
func (e *env) operatorSchema() string { return retainedSchema(e.cfg.OperatorRows, v7IDs) }

// operatorFailuresSQL stores what an on-call engineer comes for: in each
// of two consumers, three causes of 500 dead messages and 100 retrying
// ones (pending after a failure, due in two hours), each with its failed
// attempts in the history over the last 6 hours, and 500 messages that
// failed, were replayed and are done.
const operatorFailuresSQL = `
INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts,
                               received_at, processed_at, available_at, payload_hash, payload, last_error, errors, bucket)
SELECT c.consumer, c.consumer || '-' || k.cause || '-' || s.state || '-' || g, 'ChargeCard', s.state, 3, 3,
       now() - g * interval '30 seconds', CASE WHEN s.state = 'done' THEN now() END,
       CASE WHEN s.state = 'pending' THEN now() + interval '2 hours' ELSE now() END,
       '\x00'::bytea, '{"order":2}'::bytea, e.text,
       jsonb_build_array(
           jsonb_build_object('attempt', 1, 'at', now() - g * interval '30 seconds', 'error', e.text),
           jsonb_build_object('attempt', 2, 'at', now() - g * interval '20 seconds', 'error', e.text)),
       /* schema */inbox_bucket(c.consumer || '-' || k.cause || '-' || s.state || '-' || g)
FROM (VALUES ('payments'), ('refunds')) AS c(consumer),
     (VALUES (1), (2), (3)) AS k(cause),
     (VALUES ('dead', 500), ('pending', 100), ('done', 500)) AS s(state, n),
     generate_series(1, s.n) AS g,
     LATERAL (SELECT CASE k.cause
         WHEN 1 THEN 'payment gateway timeout after ' || (g % 40) || 's (request ' || md5(g::text) || ')'
         WHEN 2 THEN 'card declined: insufficient funds on order ''order-' || g || ''''
         ELSE 'panic: runtime error: index out of range [' || (g % 9) || '] with length 3' END AS text) AS e`

// operatorRecentSQL stores the last hour's traffic of the operator's
// inbox afresh, at its retained days' rate ($1 messages over the hour):
// what stats' and the console's last-hour counts read. The retained days
// end at midnight, so without it their hour would be empty. It first
// deletes the hour an earlier run stored, if it is still the last hour.
// It is not vacuumed: a live inbox's newest rows are not yet either.
var operatorRecentSQL = `
WITH gone AS (
    DELETE FROM /* schema */inbox
    WHERE status = 'done' AND processed_at > now() - interval '2 hours' AND event_type = 'RecentTraffic'
)
INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts,
                               received_at, processed_at, available_at, payload_hash, payload, bucket)
SELECT CASE WHEN g % 2 = 0 THEN '` + retainedConsumers[0] + `' ELSE '` + retainedConsumers[1] + `' END, m.id, 'RecentTraffic',
       'done', 1, 25, w.t - interval '20 milliseconds', w.t, w.t, '\x00'::bytea, '{"order":1}'::bytea, /* schema */inbox_bucket(m.id)
FROM generate_series(1, $1::bigint) AS g,
     LATERAL (SELECT now() - g * interval '1 hour' / $1::bigint AS t) AS w,
     LATERAL (SELECT ` + partition.IDSQL("extract(epoch FROM w.t) * 1000", "$2::bigint + g") + ` AS id) AS m`

// operatorState is the filled schema the operator cases (and the
// console's) share: filled once per bench run (or found filled by an
// earlier one).
type operatorState struct {
	once  sync.Once
	err   error
	group string // the fingerprint of one dead group
	id    string // a done message of the first retained consumer
}

// operatorCases times each admin call behind an inboxctl read on an inbox
// of e.cfg.OperatorRows done messages: one case per call, median of runs.
func (e *env) operatorCases() []benchCase {
	st := e.operator
	rows := e.cfg.OperatorRows
	setting := func(call string) string { return fmt.Sprintf("%s, %s done", call, millions(rows)) }
	call := func(what string, do func(ctx context.Context, adm *admin.Admin, group string) error) benchCase {
		return benchCase{scenario: "operator", setting: setting(what), main: "ms",
			systems: []system{{"pgbox", e.operatorCall(st, do)}}}
	}
	list := func(f admin.Filter) func(ctx context.Context, adm *admin.Admin, group string) error {
		return func(ctx context.Context, adm *admin.Admin, group string) error {
			if f.Fingerprint != "" {
				f.Fingerprint = group
			}
			return adm.List(ctx, admin.ListOptions{Filter: f, Limit: 50}, func(admin.Message) error { return nil })
		}
	}
	dead := []pgbox.InboxStatus{pgbox.InboxDead}
	return []benchCase{
		call("stats", func(ctx context.Context, adm *admin.Admin, _ string) error {
			_, err := adm.Stats(ctx, admin.StatsOptions{})
			return err
		}),
		call("stats --exact", func(ctx context.Context, adm *admin.Admin, _ string) error {
			_, err := adm.Stats(ctx, admin.StatsOptions{Exact: true})
			return err
		}),
		call("failures", func(ctx context.Context, adm *admin.Admin, _ string) error {
			_, err := adm.Failures(ctx, admin.FailuresOptions{Limit: 50})
			return err
		}),
		call("failures --trend --since 6h", func(ctx context.Context, adm *admin.Admin, _ string) error {
			_, err := adm.Failures(ctx, admin.FailuresOptions{Limit: 50, Since: 6 * time.Hour, Buckets: 12})
			return err
		}),
		e.deadCall("failures", admin.FailuresOptions{Limit: 50}, false),
		e.deadCall("failures --trend --since 6h", admin.FailuresOptions{Limit: 50, Since: 6 * time.Hour, Buckets: 12}, false),
		e.deadCall("failures --consumer refunds (30,000 small groups)", admin.FailuresOptions{Limit: 50, Consumer: "refunds"}, false),
		e.deadCall("failures --exact", admin.FailuresOptions{Limit: 50, Exact: true}, true),
		call("list --group", list(admin.Filter{Fingerprint: "-"})),
		call("list --group --status dead", list(admin.Filter{Fingerprint: "-", Statuses: dead})),
		call("list --status dead", list(admin.Filter{Statuses: dead})),
		call("replay --group --dry-run (count)", func(ctx context.Context, adm *admin.Admin, group string) error {
			_, err := adm.Count(ctx, admin.Filter{Fingerprint: group}.ReplaySelection())
			return err
		}),
		call("replay --group of an unknown group", func(ctx context.Context, adm *admin.Admin, _ string) error {
			known, err := adm.GroupKnown(ctx, "0123456789ab")
			if err == nil && known {
				err = errors.New("a made-up fingerprint is known")
			}
			return err
		}),
		call("show", func(ctx context.Context, adm *admin.Admin, _ string) error {
			_, err := adm.Show(ctx, retainedConsumers[0], st.id)
			return err
		}),
		call("show without --consumer", func(ctx context.Context, adm *admin.Admin, _ string) error {
			consumers, err := adm.ConsumersOf(ctx, st.id)
			if err == nil && len(consumers) != 1 {
				err = fmt.Errorf("message held by %v, want %s alone", consumers, retainedConsumers[0])
			}
			return err
		}),
	}
}

// operatorCall returns a run that times one call of do on the filled
// schema (the warm-up run, at a tenth of the scale, calls it just the
// same: the table is what it is).
func (e *env) operatorCall(st *operatorState, do func(ctx context.Context, adm *admin.Admin, group string) error) runFunc {
	return func(ctx context.Context, _ scale) (Figures, error) {
		pool, _, err := newPool(ctx, e.cfg.URL, 4)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		st.once.Do(func() { st.err = e.operatorFill(ctx, pool, st) })
		if st.err != nil {
			return nil, st.err
		}
		adm, err := admin.New(pool, admin.Config{Schema: e.operatorSchema()})
		if err != nil {
			return nil, err
		}
		if err := pool.Ping(ctx); err != nil { // connect outside the timing
			return nil, err
		}
		start := time.Now()
		if err := do(ctx, adm, st.group); err != nil {
			return nil, err
		}
		return Figures{"ms": float64(time.Since(start).Microseconds()) / 1000}, nil
	}
}

// operatorFill makes the operator schema hold e.cfg.OperatorRows done
// messages (the retained scenario's fill) and the failures, unless an
// earlier run left it so, stores the last hour's traffic, and finds the fingerprint of its largest dead
// group and a done message.
func (e *env) operatorFill(ctx context.Context, pool *pgxpool.Pool, st *operatorState) error {
	if err := e.retained.fill(ctx, e, pool, e.cfg.OperatorRows, v7IDs); err != nil {
		return err
	}
	schema := e.operatorSchema()
	render := func(sql string) string {
		return strings.ReplaceAll(sql, "/* schema */", pgx.Identifier{schema}.Sanitize()+".")
	}
	var failed bool
	if err := pool.QueryRow(ctx, render("SELECT EXISTS (SELECT 1 FROM /* schema */inbox WHERE last_error IS NOT NULL)")).Scan(&failed); err != nil {
		return err
	}
	if !failed {
		if _, err := pool.Exec(ctx, render(operatorFailuresSQL)); err != nil {
			return fmt.Errorf("store the failures in %s: %w", schema, err)
		}
		if err := vacuum(ctx, pool, schema, "inbox"); err != nil {
			return err
		}
	}
	hour := e.cfg.OperatorRows / (retainedDays * 24)
	var seed int64
	if err := pool.QueryRow(ctx, "SELECT (extract(epoch FROM now()) * 1000)::bigint * 1000").Scan(&seed); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, render(operatorRecentSQL), hour, seed); err != nil {
		return fmt.Errorf("store the last hour's traffic in %s: %w", schema, err)
	}
	adm, err := admin.New(pool, admin.Config{Schema: schema})
	if err != nil {
		return err
	}
	groups, err := adm.Failures(ctx, admin.FailuresOptions{Limit: 1})
	if err != nil {
		return err
	}
	if len(groups) == 0 {
		return fmt.Errorf("schema %s holds no failure group: drop it and run again", schema)
	}
	st.group = groups[0].Fingerprint
	var now time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return err
	}
	return pool.QueryRow(ctx, render("SELECT message_id FROM /* schema */inbox WHERE consumer = $1 AND bucket = $2 LIMIT 1"),
		retainedConsumers[0], int32(partition.DayOf(now)-retainedDays/2)).Scan(&st.id)
}

// millions writes n for a setting: "50M", "1.5M", "200k".
func millions(n int) string {
	switch {
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	case n >= 1000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.Itoa(n)
	}
}

// deadSchema holds the failures cases' inbox: e.cfg.OperatorDeadRows dead
// messages and nothing else, kept between runs of the bench.
func (e *env) deadSchema() string {
	return "pgbox_bench_dead_" + strings.ToLower(millions(e.cfg.OperatorDeadRows))
}

// deadMark is the comment a filled dead schema carries, at this build's
// schema version: what a later run checks to reuse it.
func deadMark(rows int) string {
	return fmt.Sprintf("pgbox-bench dead: %d dead rows, schema version %d", rows, pgbox.SchemaVersion)
}

// operatorDeadSQL stores $1 dead messages, as an outage leaves them, each
// with three failed attempts in its history, spread over the last 6 hours
// in arrival order: nine in ten in consumer payments, in six groups (three
// causes, two event types); the rest in consumer refunds, in 10,000
// groups of about three (10,000 event types, three causes each).
const operatorDeadSQL = `
INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts,
                               received_at, available_at, payload_hash, payload, last_error, errors, bucket)
SELECT m.consumer, m.id, m.event_type, 'dead', 3, 3, m.at, m.at, '\x00'::bytea, '{"order":2}'::bytea, e.text,
       jsonb_build_array(
           jsonb_build_object('attempt', 1, 'at', m.at, 'error', e.text),
           jsonb_build_object('attempt', 2, 'at', m.at + interval '1 second', 'error', e.text),
           jsonb_build_object('attempt', 3, 'at', m.at + interval '3 seconds', 'error', e.text)),
       /* schema */inbox_bucket(m.id)
FROM generate_series(1, $1::int) AS g,
     LATERAL (SELECT CASE WHEN g % 10 = 0 THEN 'refunds' ELSE 'payments' END AS consumer,
                     CASE WHEN g % 10 = 0 THEN 'Refund' || (g / 10 % 10000)
                          WHEN g % 2 = 0 THEN 'ChargeCard' ELSE 'CapturePayment' END AS event_type,
                     'dead-' || g AS id,
                     now() - interval '6 hours' + g * interval '6 hours' / $1::int AS at) AS m,
     LATERAL (SELECT CASE g % 3
         WHEN 0 THEN 'payment gateway timeout after ' || (g % 40) || 's (request ' || md5(g::text) || ')'
         WHEN 1 THEN 'card declined: insufficient funds on order ''order-' || g || ''''
         ELSE 'panic: runtime error: index out of range [' || (g % 9) || '] with length 3' END AS text) AS e`

// deadState is the dead schema, filled once per bench run (or found
// filled by an earlier one).
type deadState struct {
	once sync.Once
	err  error
}

// deadCall is an operator case that times Failures with opts on the dead
// schema (once, without a warm-up, if once: a read of every dead message).
func (e *env) deadCall(what string, opts admin.FailuresOptions, once bool) benchCase {
	run := func(ctx context.Context, _ scale) (Figures, error) {
		pool, _, err := newPool(ctx, e.cfg.URL, 4)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		e.dead.once.Do(func() { e.dead.err = e.deadFill(ctx, pool) })
		if e.dead.err != nil {
			return nil, e.dead.err
		}
		adm, err := admin.New(pool, admin.Config{Schema: e.deadSchema()})
		if err != nil {
			return nil, err
		}
		if err := pool.Ping(ctx); err != nil { // connect outside the timing
			return nil, err
		}
		start := time.Now()
		groups, err := adm.Failures(ctx, opts)
		took := time.Since(start)
		if err != nil {
			return nil, err
		}
		if len(groups) == 0 {
			return nil, fmt.Errorf("%s: no failure group in %s: drop the schema and run again", what, e.deadSchema())
		}
		return Figures{"ms": float64(took.Microseconds()) / 1000}, nil
	}
	return benchCase{scenario: "operator", setting: fmt.Sprintf("%s, %s dead messages", what, millions(e.cfg.OperatorDeadRows)),
		main: "ms", once: once, systems: []system{{"pgbox", run}}}
}

// deadFill makes the dead schema hold e.cfg.OperatorDeadRows dead
// messages (operatorDeadSQL), unless an earlier run left it so.
func (e *env) deadFill(ctx context.Context, pool *pgxpool.Pool) error {
	schema, rows := e.deadSchema(), e.cfg.OperatorDeadRows
	var mark *string
	err := pool.QueryRow(ctx, "SELECT obj_description(oid, 'pg_namespace') FROM pg_catalog.pg_namespace WHERE nspname = $1", schema).Scan(&mark)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if mark != nil && *mark == deadMark(rows) {
		fmt.Fprintf(e.cfg.Progress, "operator: reusing schema %s\n", schema)
		return nil
	}
	if err := pgboxSchema(ctx, pool, schema); err != nil {
		return err
	}
	sql := strings.ReplaceAll(operatorDeadSQL, "/* schema */", pgx.Identifier{schema}.Sanitize()+".")
	if _, err := pool.Exec(ctx, sql, rows); err != nil {
		return fmt.Errorf("store the dead messages in %s: %w", schema, err)
	}
	if err := vacuum(ctx, pool, schema, "inbox"); err != nil {
		return err
	}
	// COMMENT takes no parameter; the mark is plain words and digits.
	_, err = pool.Exec(ctx, "COMMENT ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" IS '"+deadMark(rows)+"'")
	return err
}
