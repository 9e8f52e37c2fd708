package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/notify"
)

const (
	// MaxPayloadBytesDefault is the default Config.MaxPayloadBytes: 1 MiB.
	MaxPayloadBytesDefault = 1 << 20
	// NotifyIntervalDefault is the default Config.NotifyInterval: 10ms.
	NotifyIntervalDefault = notify.NotifyIntervalDefault
)

// Config configures an Outbox.
type Config struct {
	// MaxPayloadBytes is the largest payload accepted. Defaults to
	// MaxPayloadBytesDefault (1 MiB); -1 means no limit beyond PostgreSQL's
	// own 1 GB. Keep it no larger than the consumers' inbox limit.
	MaxPayloadBytes int

	// NotifyInterval is how often, at most, this Outbox wakes idle relays
	// with a NOTIFY in a business transaction: one per transaction would make
	// them all wait in turn on PostgreSQL's notification lock at commit.
	// Writes in between are announced together by one NOTIFY sent an interval
	// after the last of them. Defaults to NotifyIntervalDefault (10ms); -1
	// notifies in every Write.
	//
	// The interval is per sender: every Inbox and Outbox in every process
	// on the database notifies on its own, and all of them share the lock.
	// With many senders on one busy database, raise it (the orders example
	// uses 100ms): a longer interval costs idle workers that much latency,
	// never a message.
	NotifyInterval time.Duration

	// Propagator writes the trace context of Write's context into each
	// message's metadata, so the consumer's handler continues the trace.
	// Defaults to W3C Trace Context (traceparent, tracestate).
	Propagator propagation.TextMapPropagator

	// Schema is the PostgreSQL schema holding pgbox's tables. Defaults to
	// pgbox.DefaultSchema.
	Schema string
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, MaxPayloadBytesDefault)
	c.NotifyInterval = cmp.Or(c.NotifyInterval, NotifyIntervalDefault)
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	c.Schema = cmp.Or(c.Schema, pgbox.DefaultSchema)
	return c
}

func (c Config) validate() error {
	if c.NotifyInterval < 0 && c.NotifyInterval != -1 {
		return fmt.Errorf("outbox: Config.NotifyInterval is %s: use a positive interval, 0 for the default or -1 to notify every time", c.NotifyInterval)
	}
	if c.MaxPayloadBytes < -1 {
		return fmt.Errorf("outbox: Config.MaxPayloadBytes is %d: use a positive limit, 0 for the default or -1 for none", c.MaxPayloadBytes)
	}
	if err := ident.ValidateSchema(c.Schema); err != nil {
		return fmt.Errorf("outbox: Config.Schema: %w", err)
	}
	return nil
}

// Outbox writes messages into the outbox table inside business
// transactions. It is safe for concurrent use.
type Outbox struct {
	cfg      Config
	channel  string
	notifies *notify.Limiter
	pool     *pgxpool.Pool
	seqName  string
	write    string
	writeOne string
}

// New returns an Outbox. pool is used only to explain errors (a schema
// that is missing or outdated); messages are written in the caller's
// transaction. It does not touch the database.
func New(pool *pgxpool.Pool, cfg Config) (*Outbox, error) {
	if pool == nil {
		return nil, errors.New("outbox: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Outbox{
		cfg:      cfg,
		channel:  ident.Channel(cfg.Schema, "outbox"),
		notifies: notify.NewLimiter(cfg.NotifyInterval, func() { sendNotify(pool, ident.Channel(cfg.Schema, "outbox")) }),
		pool:     pool,
		seqName:  ident.Render("/* schema */outbox_seq", cfg.Schema),
		write:    ident.Render(writeSQL, cfg.Schema),
		writeOne: ident.Render(writeOneSQL, cfg.Schema),
	}, nil
}

// sendNotify sends an owed notification on its own, outside any business
// transaction and committed asynchronously, so that it does not hold
// PostgreSQL's notification lock through a WAL flush while business
// transactions queue behind it (see notify.SendSQL). It is a hint: if it
// fails, the relays' polling finds the rows.
func sendNotify(pool *pgxpool.Pool, channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = notify.Send(ctx, pool, channel, "")
}
