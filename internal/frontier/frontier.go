// Package frontier tells a claim where in an index of pending rows, in
// available_at order, to start looking for fresh work.
//
// A claimed row leaves its entry in the partial index of pending rows (the
// inbox's inbox_pending_idx, the outbox's outbox_pending_idx) until VACUUM
// removes it, so a claim that reads the index from its start steps over
// every row claimed since the partition was last vacuumed: after 300,000
// claims, some 1,500 index pages per claim, 3 ms, growing until autovacuum
// comes. So a claim reads from the frontier on: the oldest available_at
// among the fresh rows the last claims took, less a margin.
//
// A row can still turn pending behind it: written in a transaction that
// began before the frontier (its available_at is the transaction's start)
// and committed after; or left pending by a claim that rolled back. So
// the frontier is the later of the oldest row taken less Margin, and the
// start of the oldest transaction open as the claim began
// (OpenSinceSQL) less Slack, but never past the oldest row taken: a row
// of a transaction open at the claim is found by the next one. Where the
// open transactions cannot all be seen, the frontier stays the whole
// margin behind. Any other late row (of a transaction open longer than
// the margin, or one that took its start time more than Slack before the
// server showed it open, or left by a rollback, or dated in the past by
// hand) is found by the first claim after the full-claim interval, which
// reads the index from its start and sets the frontier anew; so such
// rows wait that long more at most, or until the next poll when the
// claimer is idle. A fixed margin alone would make every claim step over
// a margin's worth of rows already claimed: over a backlog, tens of
// thousands of index entries a claim (docs/design.md).
//
// A row with an ordering key can be claimed only once the row before it
// on its key is done; meanwhile the claims of other rows move the frontier
// on, past it. So once the claimer has finished a claimed row that has a
// key, it calls Rewind with the row's arrival time (received_at,
// created_at): the next claim reads from there, less the margin, and finds
// the key's next row, which arrived after it. A row's available_at is never
// earlier than its arrival (both are the writing transaction's start, and
// every later change sets it to now() or after), and the key's next row
// arrived later, unless its transaction began more than the margin before
// the finished row's: that one waits for a full claim, as any late row.
// Without the rewind, a key's backlog older than the frontier would move
// one row per full claim, one a second; with a rewind to the index's start,
// a claimer whose rows all have keys would read every entry claimed since
// the last vacuum, as if there were no frontier.
package frontier

import (
	"sync"
	"time"
)

// OpenSinceSQL returns when the oldest transaction open in the database
// began, among its sessions that run as a role (clients and background
// workers, the claimer's own included; not autovacuum, nor walsenders);
// NULL if a transaction there may be older than any it can see: a session
// it cannot see (another role's, to a role without pg_read_all_stats), a
// session that does not report its transactions (track_activities off),
// or a prepared transaction; and NULL in a transaction above READ
// COMMITTED, whose snapshot is taken before the sessions are read. Run it
// in the claim's transaction, before the claim: a transaction whose rows
// the claim cannot see is then open as the sessions are read (or began
// after), the server reading them once a transaction.
const OpenSinceSQL = `
SELECT CASE WHEN bool_and(a.backend_type IS NOT NULL AND a.state IS DISTINCT FROM 'disabled')
             AND NOT EXISTS (SELECT 1 FROM pg_prepared_xacts WHERE database = current_database())
             AND current_setting('transaction_isolation') = 'read committed'
       THEN min(a.xact_start) END
FROM pg_stat_get_activity(NULL) AS a
WHERE a.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND a.usesysid IS NOT NULL
  AND a.backend_type IS DISTINCT FROM 'walsender'`

const (
	// Margin is how far behind the oldest row claimed the frontier stays
	// at most, for rows written in transactions that began before it; all
	// of it where the open transactions cannot be seen.
	Margin = time.Second
	// Slack is how far behind the start of the oldest transaction open
	// at a claim the frontier stays: a transaction takes its start time a
	// moment before the server shows it open.
	Slack = 50 * time.Millisecond
	// FullEvery is how often at least one claim reads the index from its
	// start.
	FullEvery = time.Second
)

// A Frontier is where the claims of one claimer (a dispatcher, a relay)
// start. It is safe for concurrent use.
type Frontier struct {
	margin, fullEvery time.Duration

	mu       sync.Mutex
	from     time.Time // zero until a claim took a fresh row
	back     time.Time // where the next claim starts instead, if earlier than from (Rewind); zero if none
	lastFull time.Time // when a claim last read from the start
}

// New returns a Frontier that stays margin behind the oldest row claimed
// and has a claim read from the start at least every fullEvery.
func New(margin, fullEvery time.Duration) *Frontier {
	return &Frontier{margin: margin, fullEvery: fullEvery}
}

// Next returns where the next claim starts: a time, or nil for the start
// of the index (a full claim). The first claim after a Rewind starts where
// it said, if that is earlier than the frontier.
func (f *Frontier) Next(now time.Time) *time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.from.IsZero() || f.lastFull.IsZero() || now.Sub(f.lastFull) >= f.fullEvery {
		f.lastFull, f.back = now, time.Time{}
		return nil
	}
	from := f.from
	if !f.back.IsZero() {
		if f.back.Before(from) {
			from = f.back
		}
		f.back = time.Time{}
	}
	return &from
}

// Took records the oldest available_at among the fresh rows a claim that
// started at start (Next's) took, nil if it took none, and when the
// oldest transaction open as it began had begun (OpenSinceSQL), nil if
// that could not be seen. A full claim saw every pending row, so it sets
// the frontier; any other only moves it on.
func (f *Frontier) Took(start, oldest, openSince *time.Time) {
	if oldest == nil {
		return
	}
	from := oldest.Add(-f.margin)
	if openSince != nil { // as far back as the oldest open transaction, within the margin
		if late := openSince.Add(-Slack); late.After(from) {
			from = late
		}
		if oldest.Before(from) {
			from = *oldest
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if start == nil || from.After(f.from) {
		f.from = from
	}
}

// Rewind makes the next claim read from arrived, less the margin, if that
// is behind the frontier: call it once a claimed row that has an ordering
// key is finished, committed, with the row's arrival time, so that the
// key's next row, which may be older than the frontier, is found. The
// rewind holds until a claim starts from it: a concurrent claim that
// started before it cannot undo it.
func (f *Frontier) Rewind(arrived time.Time) {
	back := arrived.Add(-f.margin)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.back.IsZero() || back.Before(f.back) {
		f.back = back
	}
}
