package relay

import (
	"cmp"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ResultPublisher is a Watermill publisher that also reports what became
// of each message of a call. When Config.Publisher is one, the relay
// publishes each topic's rows of a batch in one PublishResults call rather
// than one Publish call per message: a publisher that sends a call's
// messages without waiting for each one's acknowledgement before sending
// the next (package natsjs's, on NATS JetStream) then waits for the broker
// once per batch rather than once per message, and each row's outcome is
// still its own, as with one message per call: a row the broker took is
// recorded published, and only the rows it did not take are charged (or
// found to be an outage, see Config.UnreachableFunc). A call holds at most
// one row per ordering key, so that per-key order does not depend on the
// order in which the publisher sends a call's messages. Config.AtomicPublisher
// does not apply to a ResultPublisher.
type ResultPublisher interface {
	message.Publisher
	// PublishResults publishes msgs to topic and returns, once the fate
	// of every message is known, one error per message, in the order of
	// msgs: nil for a message the broker has taken, as durably as Publish
	// would have, or why it has not. A message whose error is not nil may
	// still have been published (an acknowledgement lost on the way, say),
	// which consumers dedupe.
	PublishResults(topic string, msgs ...*message.Message) []error
}

// publishResults publishes one topic's rows through rp in one call and
// notes each row's outcome in rd. A row whose key has an earlier row not
// published this round, or one already in the call, is handed back
// unpublished (the claim takes only the head of each key, so a batch holds
// at most one row per key: this is a safeguard).
func (r *Relay) publishResults(rd *round, rp ResultPublisher, group []*row) {
	if !r.canStart(rd) {
		rd.released(group...)
		return
	}
	rows := make([]*row, 0, len(group))
	inCall := map[string]bool{}
	for _, rw := range group {
		if rd.held[rw.orderingKey] || inCall[rw.orderingKey] {
			rd.released(rw)
			continue
		}
		if rw.orderingKey != "" {
			inCall[rw.orderingKey] = true
		}
		rows = append(rows, rw)
	}
	if len(rows) == 0 {
		return
	}
	msgs := toMessages(rows)
	var results []error // set by the call, read only once it has returned
	err := r.callOnce(rows, msgs, func() error {
		results = rp.PublishResults(rows[0].topic, msgs...)
		if len(results) != len(msgs) {
			return fmt.Errorf("relay: %T.PublishResults returned %d results for %d messages; it must return one per message: none is counted as published",
				rp, len(results), len(msgs))
		}
		return nil
	}, func(i int) error { return results[i] })
	if err != nil {
		r.note(rd, rows, err)
		return
	}
	for i, rw := range rows {
		r.note(rd, []*row{rw}, results[i])
	}
}

// ResultsError folds the errors a ResultPublisher's PublishResults
// returned for a call to topic into the one error its Publish returns:
// nil when every message was published, or else an error that says how
// many were not, names pkg (the publisher's package, for the message),
// and wraps the first failure, so that IsUnreachable still classifies it.
func ResultsError(pkg, topic string, results []error) error {
	var (
		failed int
		first  error
	)
	for _, err := range results {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed == 0 {
		return nil
	}
	return fmt.Errorf("%s: %d of %d messages to %q not published (the first one's error follows; any others were published): %w", pkg, failed, len(results), topic, first)
}
