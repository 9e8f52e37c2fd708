package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/partition"
)

// The retained scenario: the hot paths, and dropping a day, on an inbox
// that keeps what a long-running service keeps (a week of done messages,
// the dedupe memory) beside an empty one, in one run.

// retainedConsumers are the consumers of the retained messages: the
// receive and drain cases work for the first.
var retainedConsumers = [2]string{"payments", "shipping"}

// retainedDays is how many past days the retained messages spread over.
const retainedDays = 7

// idKind is how the messages of a case are named: UUIDv7s, as pgbox's
// outbox makes them, random ids (UUIDv4, business keys) from another
// producer, or random ids dated by a time fixed with them
// (inbox.Message.IDTime: an SQS SentTimestamp, a Kafka record time).
type idKind int

const (
	v7IDs idKind = iota
	randomIDs
	datedIDs
)

func (k idKind) String() string {
	switch k {
	case v7IDs:
		return "UUIDv7 ids"
	case datedIDs:
		return "random ids with a stable time"
	}
	return "random ids"
}

// newMessage returns a new message whose id is of kind k, made now.
func (k idKind) newMessage() inbox.Message {
	if k == v7IDs {
		return noopMessage(partition.IDAt(time.Now()).String())
	}
	m := noopMessage(uuid.NewString())
	if k == datedIDs {
		m.IDTime = time.Now()
	}
	return m
}

// retainedSchema names the schema that keeps rows retained messages of
// kind k (rows 0: an empty inbox, made afresh for every run).
func retainedSchema(rows int, k idKind) string {
	name := "pgbox_bench_retained_" + strings.ToLower(millions(rows))
	switch k {
	case randomIDs:
		name += "_random"
	case datedIDs:
		name += "_dated"
	}
	return name
}

// retainedMark is the comment a filled retained schema carries, at this
// build's schema version: what a later run checks to reuse it.
func retainedMark(rows int, k idKind) string {
	return fmt.Sprintf("pgbox-bench retained: %d done rows, %s, schema version %d", rows, k, pgbox.SchemaVersion)
}

// retainedState fills each retained schema once per bench run.
type retainedState struct {
	mu    sync.Mutex
	fills map[string]error
}

// fill makes schema hold rows retained messages of kind k, once.
func (st *retainedState) fill(ctx context.Context, e *env, pool *pgxpool.Pool, rows int, k idKind) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	schema := retainedSchema(rows, k)
	if err, done := st.fills[schema]; done {
		return err
	}
	err := e.retainedFill(ctx, pool, rows, k)
	if st.fills == nil {
		st.fills = map[string]error{}
	}
	st.fills[schema] = err
	return err
}

// retainedCases measure receiving, draining and dropping a day on inboxes
// keeping e.cfg.RetainedRows done messages, beside an empty one.
func (e *env) retainedCases() []benchCase {
	st := e.retained
	sizes := e.cfg.RetainedRows
	kept := func(rows int) string {
		if rows == 0 {
			return "none kept"
		}
		return millions(rows) + " kept"
	}
	bySize := func(k idKind, sizes []int, run func(rows int, k idKind) runFunc) []system {
		var out []system
		for _, rows := range append(append([]int(nil), sizes...), 0) {
			out = append(out, system{kept(rows), run(rows, k)})
		}
		return out
	}
	var cs []benchCase
	for _, k := range []idKind{v7IDs, datedIDs, randomIDs} {
		ks := sizes
		switch k {
		case randomIDs:
			ks = e.cfg.RetainedRandomRows
		case datedIDs:
			ks = e.cfg.RetainedDatedRows
		}
		cs = append(cs,
			benchCase{scenario: "retained", setting: "ReceiveBatch 100 from 4 conns, " + k.String(), main: "msgs/s", higherBetter: true,
				systems: bySize(k, ks, func(rows int, k idKind) runFunc { return e.retainedReceive(st, rows, k) })},
			benchCase{scenario: "retained", setting: fmt.Sprintf("drain %d, %s", e.cfg.Backlog/2, k), main: "msgs/s", higherBetter: true,
				systems: bySize(k, ks, func(rows int, k idKind) runFunc { return e.retainedDrain(st, rows, k) })},
		)
	}
	var expire []system
	for _, rows := range sizes {
		expire = append(expire, system{kept(rows), e.retainedExpire(st, rows)})
	}
	cs = append(cs, benchCase{scenario: "retained", setting: "drop an expired day", main: "ms", once: true, systems: expire})
	return cs
}

// retainedRig opens a pool of conns connections on the schema keeping rows
// messages of kind k (filled if need be; made afresh when rows is 0), with
// an inbox for its first consumer.
func (e *env) retainedRig(ctx context.Context, st *retainedState, rows int, k idKind, conns int) (*pgxpool.Pool, *inbox.Inbox, error) {
	pool, _, err := newPool(ctx, e.cfg.URL, int32(conns))
	if err != nil {
		return nil, nil, err
	}
	schema := retainedSchema(rows, k)
	if rows == 0 {
		err = pgboxSchema(ctx, pool, schema)
	} else {
		err = st.fill(ctx, e, pool, rows, k)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	in, err := inbox.New(pool, inbox.Config{Consumer: retainedConsumers[0], Schema: schema, RecentIDs: -1})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, in, nil
}

// retainedReceive receives batches of 100 new messages from 4 connections
// for the case's duration, then (not timed) deletes them, so that the
// schema keeps only its retained messages: the operator cases that share
// it must read a retained inbox, not a backlog of millions left here.
func (e *env) retainedReceive(st *retainedState, rows int, k idKind) runFunc {
	return func(ctx context.Context, s scale) (Figures, error) {
		pool, in, err := e.retainedRig(ctx, st, rows, k, 8)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		var stored atomic.Int64
		deadline := time.Now().Add(s.d(e.cfg.Duration))
		start := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		for range 4 {
			g.Go(func() error {
				msgs := make([]inbox.Message, 100)
				for time.Now().Before(deadline) {
					for i := range msgs {
						msgs[i] = k.newMessage()
					}
					if _, err := in.ReceiveBatch(gctx, msgs); err != nil {
						return err
					}
					stored.Add(int64(len(msgs)))
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		figures := Figures{"msgs/s": float64(stored.Load()) / time.Since(start).Seconds()}
		return figures, deleteReceived(ctx, pool, retainedSchema(rows, k), start)
	}
}

// deleteReceived deletes the pending messages of the first retained
// consumer that arrived since start and never failed (the operator
// scenario's failing messages have an error), through the pending index,
// and vacuums the inbox after them.
func deleteReceived(ctx context.Context, pool *pgxpool.Pool, schema string, start time.Time) error {
	_, err := pool.Exec(ctx, ident.Render(`
		DELETE FROM /* schema */inbox
		WHERE consumer = $1 AND status = 'pending' AND available_at >= $2 AND last_error IS NULL`, schema),
		retainedConsumers[0], start.Add(-time.Minute)) // a minute of slack for the two clocks
	if err != nil {
		return fmt.Errorf("delete the received messages: %w", err)
	}
	return vacuum(ctx, pool, schema, "inbox")
}

// retainedDrain stores a backlog of half the drain cases' size and drains
// it with the drain cases' workers.
func (e *env) retainedDrain(st *retainedState, rows int, k idKind) runFunc {
	return func(ctx context.Context, s scale) (Figures, error) {
		n := s.n(e.cfg.Backlog / 2)
		pool, in, err := e.retainedRig(ctx, st, rows, k, e.cfg.Workers+4)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(4)
		for from := 0; from < n; from += 1000 {
			g.Go(func() error {
				msgs := make([]inbox.Message, 0, 1000)
				for range min(1000, n-from) {
					msgs = append(msgs, k.newMessage())
				}
				_, err := in.ReceiveBatch(gctx, msgs)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		schema := retainedSchema(rows, k)
		if err := vacuum(ctx, pool, schema, "inbox"); err != nil {
			return nil, err
		}
		var handled atomic.Int64
		r := &rig{pool: pool, in: in}
		d, err := r.dispatcher(e, e.cfg.Workers, batchSize, counter(&handled))
		if err != nil {
			return nil, err
		}
		start := time.Now()
		if err := d.Start(ctx); err != nil {
			return nil, err
		}
		defer d.Stop(context.WithoutCancel(ctx))
		if err := waitCount(ctx, &handled, int64(n)); err != nil {
			return nil, err
		}
		return Figures{"msgs/s": float64(n) / time.Since(start).Seconds()}, nil
	}
}

// retainedExpire makes an expired day as large as a retained day (its
// partition filled with rows/7 done messages processed a month ago, not
// timed), then times partition.Drop of it: the database work of retention
// for a day, whatever its volume. It also reports the disk the retained
// days take per message.
func (e *env) retainedExpire(st *retainedState, rows int) runFunc {
	return func(ctx context.Context, _ scale) (Figures, error) {
		pool, _, err := e.retainedRig(ctx, st, rows, v7IDs, 4)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		schema := retainedSchema(rows, v7IDs)
		var now time.Time
		if err := pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return nil, err
		}
		var kept []string // the retained days' partitions
		for d := partition.DayOf(now) - retainedDays; d < partition.DayOf(now); d++ {
			kept = append(kept, partition.Inbox.DayPartition(d).Name)
		}
		var perMsg float64
		err = pool.QueryRow(ctx, `
			SELECT sum(pg_total_relation_size(c.oid))::float8 / $3
			FROM pg_catalog.pg_class AS c WHERE c.relnamespace = $1::regnamespace AND c.relname = ANY($2)`,
			pgx.Identifier{schema}.Sanitize(), kept, rows/retainedDays*retainedDays).Scan(&perMsg)
		if err != nil {
			return nil, err
		}
		day := partition.DayOf(now) - 30
		perDay := rows / retainedDays
		if err := partition.CreateDay(ctx, pool, schema, partition.Inbox, day, 10*time.Second); err != nil {
			return nil, err
		}
		if err := e.fillDay(ctx, pool, schema, day, perDay, "inbox", v7IDs); err != nil {
			return nil, err
		}
		// A month-old day has long been vacuumed; a fresh one would be
		// under autovacuum now, whose lock the drop waits for.
		if err := vacuum(ctx, pool, schema, partition.Inbox.DayPartition(day).Name); err != nil {
			return nil, err
		}
		start := time.Now()
		res, err := partition.Drop(ctx, pool, schema, partition.Inbox, partition.Inbox.DayPartition(day), 7*24*time.Hour, 10_000, 10*time.Second)
		elapsed := time.Since(start)
		if err == nil && !res.Dropped {
			err = errors.New("the expired day was not dropped")
		}
		if err != nil {
			return nil, err
		}
		return Figures{"ms": float64(elapsed.Microseconds()) / 1000, "rows": float64(perDay), "bytes/msg kept": perMsg}, nil
	}
}

// retainedFill makes the schema of rows retained messages of kind k hold
// them, unless an earlier run left it so: UUIDv7 ones, and random ids
// dated by a time, spread over the last seven days' partitions; random
// ones half in generation 0, half in generation 1, the current one. The outbox keeps a fifth as many
// published rows over the same days.
func (e *env) retainedFill(ctx context.Context, pool *pgxpool.Pool, rows int, k idKind) error {
	schema := retainedSchema(rows, k)
	var mark *string
	err := pool.QueryRow(ctx, "SELECT obj_description(oid, 'pg_namespace') FROM pg_catalog.pg_namespace WHERE nspname = $1", schema).Scan(&mark)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if mark != nil && *mark == retainedMark(rows, k) {
		fmt.Fprintf(e.cfg.Progress, "retained: reusing schema %s\n", schema)
		return nil
	}
	if err := pgboxSchema(ctx, pool, schema); err != nil {
		return err
	}
	var now time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return err
	}
	today := partition.DayOf(now)
	start := time.Now()
	for d := today - retainedDays; d < today; d++ {
		for _, t := range []*partition.Table{partition.Inbox, partition.Outbox} {
			if err := partition.CreateDay(ctx, pool, schema, t, d, 10*time.Second); err != nil {
				return err
			}
		}
		if err := e.fillDay(ctx, pool, schema, d, rows/retainedDays/5, "outbox", v7IDs); err != nil {
			return err
		}
		if k != randomIDs {
			if err := e.fillDay(ctx, pool, schema, d, rows/retainedDays, "inbox", k); err != nil {
				return err
			}
		}
		fmt.Fprintf(e.cfg.Progress, "retained: %s, day %s of %d stored (%s)\n", schema, d, retainedDays, time.Since(start).Round(time.Second))
	}
	if k == randomIDs {
		if err := e.fillRandom(ctx, pool, schema, rows); err != nil {
			return err
		}
	}
	for _, table := range []string{"inbox", "outbox"} {
		if err := vacuum(ctx, pool, schema, table); err != nil {
			return err
		}
	}
	// COMMENT takes no parameter; the mark is plain words and digits.
	_, err = pool.Exec(ctx, "COMMENT ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" IS '"+retainedMark(rows, k)+"'")
	return err
}

// retainedChunk is how many rows one fill statement stores.
const retainedChunk = 1_000_000

// fillDay stores n finished rows of day d in table (inbox: done messages
// of the retained consumers in turn; outbox: published rows), spread
// evenly over the day, finished 20 ms after they were made. Their ids are
// UUIDv7s made then, or for the inbox's datedIDs random ones (dated by
// that time, as a receive with it as IDTime would).
func (e *env) fillDay(ctx context.Context, pool *pgxpool.Pool, schema string, d partition.Day, n int, table string, k idKind) error {
	if n == 0 {
		return nil
	}
	step := float64(24*time.Hour/time.Millisecond) / float64(n)
	id := partition.IDSQL("$1::bigint + (g * $2::float8)::bigint", "$3::bigint + g")
	if k == datedIDs {
		id = "md5(($3::bigint + g)::text)::uuid::text" // a random-looking UUID, one per seed
	}
	q := `
INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts,
                               received_at, processed_at, available_at, payload_hash, payload, bucket)
SELECT CASE WHEN g % 2 = 0 THEN '` + retainedConsumers[0] + `' ELSE '` + retainedConsumers[1] + `' END, m.id, 'OrderPlaced', 'done', 1, 25,
       m.t, m.t + interval '20 milliseconds', m.t, '\x00'::bytea, '{"order":1}'::bytea, $6
FROM generate_series($4::bigint, $5::bigint) AS g,
     LATERAL (SELECT ` + id + ` AS id, to_timestamp(($1::bigint + (g * $2::float8)::bigint) / 1000.0) AS t) AS m`
	if table == "outbox" {
		q = `
INSERT INTO /* schema */outbox (id, topic, event_type, status, attempts, created_at, published_at, available_at, payload, bucket)
SELECT m.id::uuid, 'orders', 'OrderPlaced', 'published', 1, m.t, m.t + interval '20 milliseconds', m.t, '{"order":1}'::bytea, $6
FROM generate_series($4::bigint, $5::bigint) AS g,
     LATERAL (SELECT ` + id + ` AS id, to_timestamp(($1::bigint + (g * $2::float8)::bigint) / 1000.0) AS t) AS m`
	}
	q = strings.ReplaceAll(q, "/* schema */", pgx.Identifier{schema}.Sanitize()+".")
	seed := int64(d) * 1_000_000_000 // distinct ids on every day
	for lo := 0; lo < n; lo += retainedChunk {
		hi := min(lo+retainedChunk, n) - 1
		if _, err := pool.Exec(ctx, q, d.Time().UnixMilli(), step, seed, lo, hi, int32(d)); err != nil {
			return fmt.Errorf("fill %s %s of %s: %w", table, d, schema, err)
		}
	}
	return nil
}

// fillRandom stores rows done messages with random ids, half in
// generation 0 and, once generation 1 is started, half there, processed
// over the last seven days.
func (e *env) fillRandom(ctx context.Context, pool *pgxpool.Pool, schema string, rows int) error {
	q := strings.ReplaceAll(`
INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts,
                               received_at, processed_at, available_at, payload_hash, payload, bucket)
SELECT CASE WHEN g % 2 = 0 THEN '`+retainedConsumers[0]+`' ELSE '`+retainedConsumers[1]+`' END, gen_random_uuid()::text, 'OrderPlaced',
       'done', 1, 25, m.t, m.t + interval '20 milliseconds', m.t, '\x00'::bytea, '{"order":1}'::bytea, $3
FROM generate_series($1::bigint, $2::bigint) AS g,
     LATERAL (SELECT now() - interval '7 days' + g * interval '7 days' / $4::bigint AS t) AS m`,
		"/* schema */", pgx.Identifier{schema}.Sanitize()+".")
	start := time.Now()
	for gen := range int32(2) {
		if gen == 1 {
			if err := partition.StartGeneration(ctx, pool, schema, 0, 10*time.Second); err != nil {
				return err
			}
		}
		first := int(gen) * rows / 2
		for lo := first; lo < first+rows/2; lo += retainedChunk {
			hi := min(lo+retainedChunk, first+rows/2) - 1
			if _, err := pool.Exec(ctx, q, lo, hi, -gen, rows); err != nil {
				return fmt.Errorf("fill %s: %w", schema, err)
			}
			fmt.Fprintf(e.cfg.Progress, "retained: %s, %s of %s random ids stored (%s)\n", schema, millions(hi+1), millions(rows),
				time.Since(start).Round(time.Second))
		}
	}
	return nil
}

// ParseSizes reads a comma-separated list of row counts ("50M,10M",
// "500k"), for Config.RetainedRows.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mult := 1
		switch {
		case strings.HasSuffix(f, "M"):
			mult, f = 1_000_000, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "k"):
			mult, f = 1000, strings.TrimSuffix(f, "k")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a row count such as 10M or 500k", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}
