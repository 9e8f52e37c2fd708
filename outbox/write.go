package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/schemaerr"
)

// Write stores msgs in the outbox inside tx, the caller's business
// transaction: they will be published if and only if tx commits. It returns
// each message's id, in order. If any message is invalid, Write returns an
// error wrapping ErrInvalidMessage naming it and writes nothing.
//
// The trace context of ctx is added to each message's metadata (unless the
// metadata already carries one), so that the consumer continues the trace.
func (o *Outbox) Write(ctx context.Context, tx pgx.Tx, msgs ...Message) ([]uuid.UUID, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	n := len(msgs)
	var (
		ids                          = make([]uuid.UUID, n)
		buckets                      = make([]int32, n)
		topics, eventTypes, metadata = make([]string, n), make([]string, n), make([]string, n)
		keys                         = make([]*string, n)
		payloads                     = make([][]byte, n)
	)
	for i := range msgs {
		m := &msgs[i]
		if err := o.validate(i, m); err != nil {
			return nil, err
		}
		ids[i] = m.ID
		if ids[i] == uuid.Nil {
			var err error
			if ids[i], err = uuid.NewV7(); err != nil {
				return nil, fmt.Errorf("outbox: new message id: %w", err)
			}
		}
		if day, ok := partition.UUIDDay(ids[i]); ok {
			buckets[i] = int32(day)
		}
		topics[i] = m.Topic
		eventTypes[i] = m.EventType
		if eventTypes[i] == "" {
			eventTypes[i] = m.Topic
		}
		if m.OrderingKey != "" {
			keys[i] = &m.OrderingKey
		}
		payloads[i] = m.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
		metadata[i] = o.encodeMetadata(ctx, m.Metadata)
	}

	var channel *string // NULL: no NOTIFY
	if o.notifies.Allow() {
		channel = &o.channel
	}
	var inserted int
	var err error
	if n == 1 && keys[0] == nil && channel == nil {
		// One message without an ordering key or a NOTIFY, the common
		// case: a plain INSERT, without arrays, key locks or sorting.
		var tag pgconn.CommandTag
		tag, err = tx.Exec(ctx, o.writeOne, ids[0], topics[0], eventTypes[0], payloads[0], metadata[0], buckets[0])
		inserted = int(tag.RowsAffected())
	} else {
		// The ids go as text, cast to uuid[] in SQL: pgx encodes a
		// []uuid.UUID only when it knows the parameter's type, which the
		// exec and simple_protocol query modes never tell it.
		idText := make([]string, n)
		for i, id := range ids {
			idText[i] = id.String()
		}
		err = tx.QueryRow(ctx, o.write, idText, topics, eventTypes, keys, payloads, metadata, o.seqName, channel, buckets).Scan(&inserted, nil)
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
			return nil, fmt.Errorf("outbox: a message id is already in the outbox (%s): leave Message.ID zero for a fresh one", pgErr.Detail)
		}
		return nil, fmt.Errorf("outbox: write %d messages: %w", n, schemaerr.Explain(ctx, o.pool, o.cfg.Schema, err))
	}
	if inserted != n {
		return nil, fmt.Errorf("outbox: wrote %d of %d messages", inserted, n)
	}
	return ids, nil
}

// encodeMetadata returns md, plus the trace context of ctx unless md
// carries one, as a JSON object.
func (o *Outbox) encodeMetadata(ctx context.Context, md map[string]string) string {
	carrier := propagation.MapCarrier(maps.Clone(md))
	if carrier == nil {
		carrier = propagation.MapCarrier{}
	}
	if !hasTrace(o.cfg.Propagator, carrier) {
		o.cfg.Propagator.Inject(ctx, carrier)
	}
	b, err := json.Marshal(map[string]string(carrier))
	if err != nil {
		panic(err) // a map[string]string of valid UTF-8 always encodes
	}
	return string(b)
}

// hasTrace reports whether carrier already holds any of the propagator's
// fields.
func hasTrace(p propagation.TextMapPropagator, carrier propagation.MapCarrier) bool {
	for _, f := range p.Fields() {
		if carrier.Get(f) != "" {
			return true
		}
	}
	return false
}
