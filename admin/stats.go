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
	// Consumer is the consumer counted.
	Consumer string `json:"consumer"`
	// Dead counts its dead messages.
	Dead int64 `json:"dead"`
	// Discarded counts its discarded messages.
	Discarded int64 `json:"discarded"`
	// Done counts its done messages (the dedupe memory).
	Done int64 `json:"done"`
	// OldestPending is how long the oldest pending message has waited
	// since it was received; nil when none is pending.
	OldestPending *Duration `json:"oldest_pending"`
	// Pending counts its pending messages, new or backing off.
	Pending int64 `json:"pending"`
	// ProcessedLastHour counts the messages it completed in the last hour.
	ProcessedLastHour int64 `json:"processed_last_hour"`
	// ProcessedLastMinute counts the messages it completed in the last
	// minute.
	ProcessedLastMinute int64 `json:"processed_last_minute"`
	// Running counts its running (claimed) messages.
	Running int64 `json:"running"`
}

// OutboxStats counts the outbox.
type OutboxStats struct {
	// Dead counts the dead rows.
	Dead int64 `json:"dead"`
	// OldestUnpublished is the age of the oldest pending or running row;
	// nil when there is none.
	OldestUnpublished *Duration `json:"oldest_unpublished"`
	// Pending counts the rows waiting to be published.
	Pending int64 `json:"pending"`
	// Published counts the published rows still kept.
	Published int64 `json:"published"`
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

// Stats takes a snapshot of the inbox and outbox. It reads every row's
// status once; on a very large inbox it takes a moment.
func (a *Admin) Stats(ctx context.Context) (*Stats, error) {
	var (
		st     Stats
		oldest *float64
	)
	err := a.pool.QueryRow(ctx, a.q["outboxStats"]).Scan(&st.Outbox.Pending, &st.Outbox.Running, &st.Outbox.Published,
		&st.Outbox.Dead, &oldest, &st.At)
	if err != nil {
		return nil, a.dbError(ctx, "outbox stats", err)
	}
	st.At = st.At.UTC()
	st.Outbox.OldestUnpublished = seconds(oldest)

	rows, err := a.pool.Query(ctx, a.q["stats"])
	if err != nil {
		return nil, a.dbError(ctx, "inbox stats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c ConsumerStats
		if err := rows.Scan(&c.Consumer, &c.Pending, &c.Running, &c.Done, &c.Dead, &c.Discarded, &oldest,
			&c.ProcessedLastMinute, &c.ProcessedLastHour); err != nil {
			return nil, a.dbError(ctx, "inbox stats", err)
		}
		c.OldestPending = seconds(oldest)
		st.Consumers = append(st.Consumers, c)
	}
	if err := rows.Err(); err != nil {
		return nil, a.dbError(ctx, "inbox stats", err)
	}
	return &st, nil
}
