package admin

import (
	"context"
	"strconv"
	"time"
)

// Stats is a snapshot of the inbox and outbox.
type Stats struct {
	// At is when the snapshot was taken (database time).
	At time.Time `json:"at"`
	// Consumers has one entry per consumer with messages, by name.
	Consumers []ConsumerStats `json:"consumers"`
	// Outbox counts the outbox.
	Outbox OutboxStats `json:"outbox"`
}

// ConsumerStats counts one consumer's inbox.
type ConsumerStats struct {
	// Blocked counts its pending messages held behind a dead message of
	// their ordering key: an earlier message of the same consumer and key
	// is dead, so they do not move until an operator replays or discards
	// it. They are not counted as PendingFresh, Retrying or Scheduled.
	// Messages behind an earlier message that is pending (retrying, say)
	// or running are not blocked: they move on their own once it is
	// handled or dies, with no one acting.
	Blocked int64 `json:"blocked"`
	// Consumer is the consumer counted.
	Consumer string `json:"consumer"`
	// Dead counts its dead messages.
	Dead int64 `json:"dead"`
	// Discarded counts its discarded messages.
	Discarded int64 `json:"discarded"`
	// Done counts its done messages (the dedupe memory): exactly when
	// DoneEstimated is false, otherwise an estimate.
	Done int64 `json:"done"`
	// DoneEstimated is true when Done is an estimate from the planner's
	// statistics (StatsOptions.Exact unset, and the inbox analyzed).
	DoneEstimated bool `json:"done_estimated"`
	// NextRetryAt is when the first of its retrying messages is due;
	// nil when none is retrying.
	NextRetryAt *time.Time `json:"next_retry_at"`
	// OldestPending is how long the oldest pending message has waited
	// since it was received; nil when none is pending.
	OldestPending *Duration `json:"oldest_pending"`
	// Pending counts its pending messages: PendingFresh plus Retrying
	// plus Scheduled plus Blocked.
	Pending int64 `json:"pending"`
	// PendingFresh counts its pending messages that never failed and are
	// due, and are not Blocked: waiting for a worker (a keyed one, for the
	// earlier messages of its key to be handled first).
	PendingFresh int64 `json:"pending_fresh"`
	// ProcessedLastHour counts the messages it completed in the last hour:
	// exactly unless ProcessedLastHourEstimated.
	ProcessedLastHour int64 `json:"processed_last_hour"`
	// ProcessedLastHourEstimated is true when the inbox completed more
	// than 20,000 messages in the last hour. Stats reads no more than the
	// newest 20,000 done messages, whatever the traffic, and
	// ProcessedLastHour is then the consumer's share of them per second of
	// the time they span, times the hour.
	ProcessedLastHourEstimated bool `json:"processed_last_hour_estimated"`
	// ProcessedLastMinute counts the messages it completed in the last
	// minute: exactly unless ProcessedLastMinuteEstimated.
	ProcessedLastMinute int64 `json:"processed_last_minute"`
	// ProcessedLastMinuteEstimated is true when the newest 20,000 done
	// messages span less than a minute (the inbox completes more than
	// about 330 a second); ProcessedLastMinute is then estimated as
	// ProcessedLastHour is.
	ProcessedLastMinuteEstimated bool `json:"processed_last_minute_estimated"`
	// Retrying counts its pending messages that failed before: waiting
	// for their backoff to end (or due, once it has, or after a replay).
	// inboxctl failures shows why they failed.
	Retrying int64 `json:"retrying"`
	// Running counts its running (claimed) messages.
	Running int64 `json:"running"`
	// Scheduled counts its pending messages that never failed and are due
	// later: snoozed by their handler (dispatcher.Snooze).
	Scheduled int64 `json:"scheduled"`
}

// OutboxStats counts the outbox.
type OutboxStats struct {
	// Blocked counts the pending rows held behind a dead row of their
	// ordering key: an earlier row of the key is dead, so they are not
	// published until an operator retries it (inboxctl outbox retry).
	// They are counted in Pending too.
	Blocked int64 `json:"blocked"`
	// Dead counts the dead rows.
	Dead int64 `json:"dead"`
	// OldestUnpublished is the age of the oldest pending or running row;
	// nil when there is none.
	OldestUnpublished *Duration `json:"oldest_unpublished"`
	// Pending counts the rows waiting to be published, Blocked included.
	Pending int64 `json:"pending"`
	// Published counts the published rows still kept: estimated when
	// PublishedEstimated is set (see StatsOptions).
	Published int64 `json:"published"`
	// PublishedEstimated reports that Published comes from PostgreSQL's
	// statistics of the outbox's partitions rather than a count.
	PublishedEstimated bool `json:"published_estimated"`
	// Running counts the rows a relay is publishing.
	Running int64 `json:"running"`
}

// Duration is a time.Duration that encodes in JSON as seconds, which
// scripts handle more easily than Go's duration strings.
type Duration time.Duration

// MarshalJSON encodes d as a number of seconds, to the millisecond.
func (d Duration) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, time.Duration(d).Round(time.Millisecond).Seconds(), 'f', -1, 64), nil
}

// seconds returns s seconds as a Duration, or nil for nil.
func seconds(s *float64) *Duration {
	if s == nil {
		return nil
	}
	d := Duration(time.Duration(*s * float64(time.Second)).Round(time.Millisecond))
	return &d
}

// StatsOptions says how Stats counts.
type StatsOptions struct {
	// Exact counts done messages and published outbox rows one by one,
	// which reads every one of them: seconds or minutes on a table of many
	// millions. Defaults to false: they are estimated from the planner's
	// statistics of each partition (ConsumerStats.DoneEstimated,
	// OutboxStats.PublishedEstimated), in time that grows with the number
	// of partitions, not of rows, and counted exactly only while no
	// partition holding rows has been analyzed (a new, small table).
	Exact bool
}

// Stats takes a snapshot of the inbox and outbox. Every count but the done
// messages' is exact and read from the small partial indexes of the
// statuses it counts; see StatsOptions for done messages.
func (a *Admin) Stats(ctx context.Context, opts StatsOptions) (*Stats, error) {
	var (
		st     Stats
		oldest *float64
		err    error
	)
	if st.Outbox, st.At, err = a.outboxStats(ctx, opts.Exact); err != nil {
		return nil, err
	}

	rows, err := a.pool.Query(ctx, a.q["stats"])
	if err != nil {
		return nil, a.dbError(ctx, "inbox stats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c ConsumerStats
		if err := rows.Scan(&c.Consumer, &c.PendingFresh, &c.Retrying, &c.Scheduled, &c.Blocked, &c.Running, &c.Dead, &c.Discarded,
			&oldest, &c.NextRetryAt, &c.ProcessedLastMinute, &c.ProcessedLastHour, &c.ProcessedLastMinuteEstimated, &c.ProcessedLastHourEstimated); err != nil {
			return nil, a.dbError(ctx, "inbox stats", err)
		}
		c.Pending = c.PendingFresh + c.Retrying + c.Scheduled + c.Blocked
		c.OldestPending = seconds(oldest)
		c.NextRetryAt = utc(c.NextRetryAt)
		st.Consumers = append(st.Consumers, c)
	}
	if err := rows.Err(); err != nil {
		return nil, a.dbError(ctx, "inbox stats", err)
	}
	if err := a.countDone(ctx, opts.Exact, st.Consumers); err != nil {
		return nil, err
	}
	return &st, nil
}
