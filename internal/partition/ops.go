package partition

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgbox/pgbox/internal/ident"
)

// DB is what partitioning needs of a pool or a connection.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrLockTimeout is returned when a change could not take its locks
// within the lock timeout it set itself: nothing was changed, and the
// next run tries again.
var ErrLockTimeout = errors.New("partition: locks not granted within the lock timeout; try again later")

// State is a table's row of the partitioning table.
type State struct {
	// Generation is the inbox generation new undated messages go to.
	Generation int32
	// GenerationStartedAt is when it started taking them.
	GenerationStartedAt time.Time
	// Origin is the first day whose UUIDv7 ids are dated.
	Origin Day
}

// ReadState reads t's row of the partitioning table in schema.
func ReadState(ctx context.Context, db DB, schema string, t *Table) (State, error) {
	var s State
	err := db.QueryRow(ctx, ident.Render(`
SELECT origin_day, generation, generation_started_at FROM /* schema */partitioning WHERE table_name = $1`, schema),
		t.Name).Scan(&s.Origin, &s.Generation, &s.GenerationStartedAt)
	if err != nil {
		return State{}, fmt.Errorf("read how %s is partitioned: %w", t.Name, err)
	}
	return s, nil
}

// List returns t's partitions in schema, ordered by bucket, the default
// partition first.
func List(ctx context.Context, db DB, schema string, t *Table) ([]Partition, error) {
	rows, err := db.Query(ctx, `
SELECT c.relname, pg_catalog.pg_get_expr(c.relpartbound, c.oid)
FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass
ORDER BY c.relpartbound IS NOT NULL AND pg_catalog.pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT', c.relname`,
		ident.Quote(schema)+"."+t.Name)
	if err != nil {
		return nil, fmt.Errorf("list the partitions of %s: %w", t.Name, err)
	}
	var out []Partition
	for rows.Next() {
		var name, bound string
		if err := rows.Scan(&name, &bound); err != nil {
			return nil, fmt.Errorf("list the partitions of %s: %w", t.Name, err)
		}
		p, err := t.parseBound(name, bound)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the partitions of %s: %w", t.Name, err)
	}
	sortByBucket(out)
	return out, nil
}

// sortByBucket orders partitions as List returns them.
func sortByBucket(ps []Partition) {
	rank := func(p Partition) int64 {
		if p.Kind == KindDefault {
			return -1 << 40
		}
		return int64(p.bucket())
	}
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && rank(ps[j]) < rank(ps[j-1]); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// inTx runs fn in a transaction whose every lock request waits at most
// lockTimeout (set for the transaction only, so nothing outlives it on a
// pooled connection), and commits it. A lock not granted in time rolls
// everything back and returns ErrLockTimeout.
func inTx(ctx context.Context, db DB, lockTimeout time.Duration, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ms := strconv.FormatInt(max(lockTimeout.Milliseconds(), 1), 10) + "ms"
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.set_config('lock_timeout', $1, true)", ms); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return ErrLockTimeout
		}
		return err
	}
	return tx.Commit(ctx)
}

// execAll runs statements in order on tx.
func execAll(ctx context.Context, tx pgx.Tx, statements ...string) error {
	for _, s := range statements {
		if _, err := tx.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// CreateDay creates and attaches t's partition for day d, moving into it
// the rows of that day that the default partition held (ids made on a day
// that had no partition yet: a producer's clock ahead of the database's).
//
// It locks the parent in SHARE UPDATE EXCLUSIVE mode first (ATTACH
// PARTITION's lock, which receives, claims and reads do not wait for), then
// the default partition exclusively: every statement that reads or writes
// the default partition, and most receives and claims do since their plans
// cannot leave it out, waits from then until the commit, at most the lock
// timeout for the lock and then the few rows the default partition holds.
// Taking the parent first is the order Drop's DETACH takes them in, so the
// two never deadlock (a migrator's run of CreateDay beside the leader's
// Drop). A row routed to the default
// partition by a statement that started before the attach waits for the
// lock, and then PostgreSQL checks it against the default partition's new
// bound and refuses it with an error (retried, it goes to the new
// partition, where a redelivery finds the moved row): no id is ever stored
// twice.
func CreateDay(ctx context.Context, db DB, schema string, t *Table, d Day, lockTimeout time.Duration) error {
	p := t.DayPartition(d)
	name, parent, def := ident.Quote(schema)+"."+ident.Quote(p.Name), ident.Quote(schema)+"."+t.Name, ident.Quote(schema)+"."+ident.Quote(t.Default().Name)
	b := strconv.Itoa(int(d))
	err := inTx(ctx, db, lockTimeout, func(tx pgx.Tx) error {
		return execAll(ctx, tx,
			"LOCK TABLE ONLY "+parent+" IN SHARE UPDATE EXCLUSIVE MODE",
			"LOCK TABLE "+def+" IN ACCESS EXCLUSIVE MODE",
			"CREATE TABLE "+name+" (LIKE "+parent+" INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)",
			"ALTER TABLE "+name+" ADD CONSTRAINT "+ident.Quote(p.Name+"_day_check")+" CHECK ("+t.check(p)+")",
			"INSERT INTO "+name+" SELECT * FROM "+def+" WHERE bucket = "+b,
			"DELETE FROM "+def+" WHERE bucket = "+b,
			"ALTER TABLE "+parent+" ATTACH PARTITION "+name+" FOR VALUES FROM ("+b+") TO ("+strconv.Itoa(int(d)+1)+")",
		)
	})
	if err != nil {
		return fmt.Errorf("create partition %s: %w", p.Name, err)
	}
	return nil
}

// StartGeneration starts inbox generation from+1, whose partition it
// creates if need be, unless the current generation is no longer from
// (another maintainer started one). New undated messages go to the new
// generation from then on.
//
// The switch takes an exclusive lock on the partitioning table, which
// every receive of an undated id holds (shared) until its transaction
// ends: it waits for the receives under way to end, and the receives that
// come after it see the new generation and every message the earlier ones
// stored. So a redelivery is never stored in one generation while its
// first delivery is still being stored in another. Receives wait while the
// switch waits, at most lockTimeout.
func StartGeneration(ctx context.Context, db DB, schema string, from int32, lockTimeout time.Duration) error {
	t := Inbox
	p := t.GenerationPartition(from + 1)
	existing, err := List(ctx, db, schema, t)
	if err != nil {
		return err
	}
	if !hasPartition(existing, p) {
		name, parent := ident.Quote(schema)+"."+ident.Quote(p.Name), ident.Quote(schema)+"."+t.Name
		b := strconv.Itoa(int(p.bucket()))
		err := inTx(ctx, db, lockTimeout, func(tx pgx.Tx) error {
			return execAll(ctx, tx,
				"CREATE TABLE "+name+" (LIKE "+parent+" INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)",
				"ALTER TABLE "+name+" ADD CONSTRAINT "+ident.Quote(p.Name+"_bucket_check")+" CHECK ("+t.check(p)+")",
				"ALTER TABLE "+parent+" ATTACH PARTITION "+name+" FOR VALUES FROM ("+b+") TO ("+strconv.Itoa(int(p.bucket())+1)+")",
			)
		})
		if err != nil {
			return fmt.Errorf("create partition %s: %w", p.Name, err)
		}
	}
	err = inTx(ctx, db, lockTimeout, func(tx pgx.Tx) error {
		return execAll(ctx, tx,
			ident.Render("LOCK TABLE /* schema */partitioning IN ACCESS EXCLUSIVE MODE", schema),
			ident.Render(`UPDATE /* schema */partitioning SET generation = `+strconv.Itoa(int(from)+1)+
				`, generation_started_at = now() WHERE table_name = 'inbox' AND generation = `+strconv.Itoa(int(from)), schema),
		)
	})
	if err != nil {
		return fmt.Errorf("start inbox generation %d: %w", from+1, err)
	}
	return nil
}

// hasPartition reports whether ps holds p.
func hasPartition(ps []Partition, p Partition) bool {
	for _, q := range ps {
		if q.Kind == p.Kind && q.bucket() == p.bucket() {
			return true
		}
	}
	return false
}

// errKeep rolls back a drop that, once its locks were held, found the
// partition still needed.
var errKeep = errors.New("partition still needed")

// DropResult says what Drop did with a partition.
type DropResult struct {
	// Dropped reports whether the partition was dropped.
	Dropped bool
	// Kept is how many rows that were not done it moved out (Dropped), or
	// would have had to (not Dropped).
	Kept int64
	// Why says why a partition found still needed was not dropped (see
	// contents.keep); "" when it was, or when its locks were not granted.
	Why string
}

// Drop drops partition p of t if every finished (done, published) row in
// it finished before now() - retention, moving its other rows (pending,
// running, dead, discarded) to the partition that now holds their bucket:
// the default partition for a day's rows, the current generation for a
// generation's. It leaves p alone, with Dropped false and Why saying why,
// when a row finished within the window, more than maxKept rows would
// have to move (they would hold every receive and worker up while moving;
// a later run drops it once they are handled), or a generation's row is
// under a lease (a later run drops it once its worker has recorded the
// outcome).
//
// The partition is detached first, which takes an exclusive lock on the
// parent table: receives, claims and reads wait while the partition's
// remaining rows move, at most lockTimeout for the lock itself. What
// happens to a finished row is then one DROP TABLE, however many there
// are, and leaves no dead tuples to vacuum.
func Drop(ctx context.Context, db DB, schema string, t *Table, p Partition, retention time.Duration, maxKept int64, lockTimeout time.Duration) (DropResult, error) {
	var res DropResult
	name, parent := ident.Quote(schema)+"."+ident.Quote(p.Name), ident.Quote(schema)+"."+t.Name
	bucket := "bucket"
	if p.Kind == KindGeneration {
		bucket = ident.Render("-(SELECT generation FROM /* schema */partitioning WHERE table_name = 'inbox')", schema)
	}
	err := inTx(ctx, db, lockTimeout, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "ALTER TABLE "+parent+" DETACH PARTITION "+name); err != nil {
			return err
		}
		if p.Kind == KindGeneration { // no new generation while its rows move to the current one
			if _, err := tx.Exec(ctx, ident.Render("LOCK TABLE /* schema */partitioning IN SHARE MODE", schema)); err != nil {
				return err
			}
		}
		c, err := t.contents(ctx, tx, name, retention)
		res.Kept = c.unfinished
		if err != nil {
			return err
		}
		if res.Why = c.keep(p, maxKept); res.Why != "" {
			return errKeep
		}
		return execAll(ctx, tx,
			"INSERT INTO "+parent+" ("+t.columns+", bucket) "+t.selectUnfinished(name, bucket),
			"DROP TABLE "+name,
		)
	})
	switch {
	case errors.Is(err, errKeep):
		return res, nil
	case err != nil:
		return res, fmt.Errorf("drop partition %s: %w", p.Name, err)
	}
	res.Dropped = true
	return res, nil
}
