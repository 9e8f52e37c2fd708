package partition

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/pgbox/pgbox/internal/tables"
)

// Table is one of pgbox's two partitioned tables and what partitioning
// needs to know of it.
type Table struct {
	// Name is the parent table's name, unquoted: "inbox" or "outbox".
	Name string
	// columns lists every column but bucket, in the table's order.
	columns string
	// doneAt is the column that says when a row was finished.
	doneAt string
	// done is the status of a finished row: only those are dropped.
	done string
	// generations says whether undated rows go to generations (inbox)
	// rather than one undated partition (outbox).
	generations bool
	// unfinished lists the statuses (SQL literals) of rows that a drop
	// moves out rather than drops, each with a partial index of its own.
	unfinished []string
	// running is the status of a row a worker holds under a lease.
	running string
}

// The two tables.
var (
	Inbox = &Table{
		Name: "inbox",
		columns: "consumer, message_id, seq, event_type, status, attempts, max_attempts, replays, available_at, " +
			"received_at, processed_at, claim_token, ordering_key, payload_hash, payload, metadata, last_error, errors",
		doneAt:      "processed_at",
		done:        tables.InboxDone,
		generations: true,
		unfinished:  []string{tables.InboxPending, tables.InboxRunning, tables.InboxDead, tables.InboxDiscarded},
		running:     tables.InboxRunning,
	}
	Outbox = &Table{
		Name: "outbox",
		columns: "id, seq, topic, event_type, ordering_key, status, attempts, replays, available_at, created_at, " +
			"published_at, claim_token, payload, metadata, last_error, errors",
		doneAt:     "published_at",
		done:       tables.OutboxPublished,
		unfinished: []string{tables.OutboxPending, tables.OutboxRunning, tables.OutboxDead},
		running:    tables.OutboxRunning,
	}
)

// selectUnfinished is the SQL that reads every column but bucket of the
// unfinished rows of the partition named name (quoted), and bucket as the
// SQL expression bucket: a SELECT per status, each through its partial
// index, so that moving a few rows out of a large partition reads those
// rows only.
func (t *Table) selectUnfinished(name, bucket string) string {
	selects := make([]string, len(t.unfinished))
	for i, s := range t.unfinished {
		selects[i] = "SELECT " + t.columns + ", " + bucket + " FROM " + name + " WHERE status = " + s
	}
	return strings.Join(selects, " UNION ALL ")
}

// Kind says what a partition holds.
type Kind int

// The kinds of partition.
const (
	// KindDay holds the dated rows of one day.
	KindDay Kind = iota + 1
	// KindGeneration holds the undated inbox rows first received while
	// its generation was current.
	KindGeneration
	// KindUndated holds the outbox's undated rows.
	KindUndated
	// KindDefault holds dated rows whose day has no partition.
	KindDefault
)

// String names the kind as operators read it.
func (k Kind) String() string {
	switch k {
	case KindDay:
		return "day"
	case KindGeneration:
		return "generation"
	case KindUndated:
		return "undated"
	case KindDefault:
		return "default"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Partition is one partition of a Table.
type Partition struct {
	// Day is the day of a KindDay partition.
	Day Day
	// Generation is the number of a KindGeneration partition.
	Generation int32
	// Kind says what the partition holds.
	Kind Kind
	// Name is the partition's table name, unquoted.
	Name string
}

// DayPartition returns the partition of t for day d.
func (t *Table) DayPartition(d Day) Partition {
	return Partition{Kind: KindDay, Day: d, Name: t.Name + "_d" + d.String()}
}

// GenerationPartition returns the inbox partition of generation g.
func (t *Table) GenerationPartition(g int32) Partition {
	return Partition{Kind: KindGeneration, Generation: g, Name: fmt.Sprintf("%s_g%d", t.Name, g)}
}

// Undated returns the outbox's partition of undated rows (bucket 0).
func (t *Table) Undated() Partition {
	return Partition{Kind: KindUndated, Name: t.Name + "_undated"}
}

// Default returns t's default partition.
func (t *Table) Default() Partition {
	return Partition{Kind: KindDefault, Name: t.Name + "_default"}
}

// bucket returns the lowest bucket p holds (day partitions and
// generations hold one each).
func (p Partition) bucket() int32 {
	if p.Kind == KindDay {
		return int32(p.Day)
	}
	return -p.Generation // generations, and bucket 0 of the outbox's undated rows
}

// rangeBound matches a range partition's bound as pg_get_expr prints it,
// which quotes negative numbers: FROM ('-1') TO (0).
var rangeBound = regexp.MustCompile(`^FOR VALUES FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)$`)

// parseBound reads a partition's kind and bucket from its bound as
// pg_get_expr prints it: "FOR VALUES FROM (20000) TO (20001)" or "DEFAULT".
// Names are not trusted: an operator may have renamed a partition.
func (t *Table) parseBound(name, bound string) (Partition, error) {
	if bound == "DEFAULT" {
		return Partition{Kind: KindDefault, Name: name}, nil
	}
	m := rangeBound.FindStringSubmatch(bound)
	if m == nil {
		return Partition{}, fmt.Errorf("partition %s of %s has a bound pgbox did not make: %s", name, t.Name, bound)
	}
	from, _ := strconv.ParseInt(m[1], 10, 32)
	if to, _ := strconv.ParseInt(m[2], 10, 32); to != from+1 {
		return Partition{}, fmt.Errorf("partition %s of %s has a bound pgbox did not make: %s", name, t.Name, bound)
	}
	switch {
	case from > 0:
		return Partition{Kind: KindDay, Day: Day(from), Name: name}, nil
	case t.generations:
		return Partition{Kind: KindGeneration, Generation: int32(-from), Name: name}, nil
	case from == 0:
		return Partition{Kind: KindUndated, Name: name}, nil
	}
	return Partition{}, fmt.Errorf("partition %s of %s has a bound pgbox did not make: %s", name, t.Name, bound)
}

// check returns the CHECK constraint of partition p: its bound, and for an
// outbox day partition that every id is a UUIDv7 of that day. It reads the
// id's first 48 bits and its version digit, without the regular expression
// of uuidv7_day, which would cost more than the insert; an id that is no
// hexadecimal UUID fails it with an error. An inbox day partition checks
// its bound only: it also holds ids that are no UUIDv7, dated by the time
// they were received with (inbox.Message.IDTime, migration 11). The bucket
// term lets ATTACH see at once that the partition fits its bound.
func (t *Table) check(p Partition) string {
	b := strconv.Itoa(int(p.bucket()))
	if p.Kind != KindDay || t != Outbox {
		return "bucket = " + b
	}
	return "bucket = " + b + " AND substr(id::text, 15, 1) = '7'" +
		" AND ('x' || substr(id::text, 1, 8) || substr(id::text, 10, 4))::bit(48)::bigint / 86400000 = " + b
}
