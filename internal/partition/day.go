package partition

import (
	"time"

	"github.com/google/uuid"
)

// Day is a UTC calendar day, counted from 1970-01-01 (day 0). It is the
// bucket of a day partition.
type Day int32

// msPerDay is the length of a Day in the milliseconds a UUIDv7 counts.
const msPerDay = 86_400_000

// DayOf returns the UTC day of t.
func DayOf(t time.Time) Day {
	return Day(t.UnixMilli() / msPerDay) // every time pgbox meets is after 1970
}

// Time returns the instant day starts, in UTC.
func (d Day) Time() time.Time {
	return time.UnixMilli(int64(d) * msPerDay).UTC()
}

// String returns the day as YYYYMMDD, as it appears in partition names.
func (d Day) String() string {
	return d.Time().Format("20060102")
}

// IDDay returns the day a message id was made on, if the id is a UUIDv7
// written the canonical way (36 characters, lower-case hex, hyphens at 8,
// 13, 18 and 23, version 7, RFC 9562 variant), as uuid.UUID.String and
// pgbox's outbox write them: its first 48 bits are the Unix time in
// milliseconds. Any other id, an upper-case UUIDv7 included, has no day.
//
// The SQL function uuidv7_day (migration 9) computes the same, for the
// constraints that keep every row in the partition of its id's day
// (TestIDDayAgreesWithSQL).
func IDDay(id string) (Day, bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' || id[14] != '7' {
		return 0, false
	}
	switch id[19] {
	case '8', '9', 'a', 'b':
	default:
		return 0, false
	}
	var ms int64
	for i := range len(id) {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			continue
		}
		v, ok := hexDigit(id[i])
		if !ok {
			return 0, false
		}
		if i < 13 { // the 12 hex digits of the 48-bit time
			ms = ms<<4 | int64(v)
		}
	}
	return Day(ms / msPerDay), true
}

// UUIDDay is IDDay for a uuid.UUID, such as an outbox id.
func UUIDDay(id uuid.UUID) (Day, bool) {
	if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
		return 0, false
	}
	ms := int64(id[0])<<40 | int64(id[1])<<32 | int64(id[2])<<24 | int64(id[3])<<16 | int64(id[4])<<8 | int64(id[5])
	return Day(ms / msPerDay), true
}

// hexDigit returns the value of a lower-case hexadecimal digit.
func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// IDAt returns a new UUIDv7 made at t: random but for its first 48 bits,
// t's Unix time in milliseconds. Tests and benchmarks use it for messages
// made on a day other than today.
func IDAt(t time.Time) uuid.UUID {
	id := uuid.Must(uuid.NewV7())
	ms := t.UnixMilli()
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	return id
}

// IDSQL returns a SQL expression that makes a canonical UUIDv7 id (text)
// from two SQL expressions: ms, the Unix time in milliseconds it is made
// at, and seed, an integer that picks its random part (md5 of it, so one
// seed gives one id). Benchmarks and tests fill tables with millions of
// such ids in a statement; partition.IDDay reads their day.
func IDSQL(ms, seed string) string {
	h := "lpad(to_hex((" + ms + ")::bigint), 12, '0')"
	r := "md5((" + seed + ")::text)"
	return "(substr(" + h + ", 1, 8) || '-' || substr(" + h + ", 9, 4) || '-7' || substr(" + r + ", 1, 3) || '-8' || substr(" + r + ", 4, 3) || '-' || substr(" + r + ", 7, 12))"
}
