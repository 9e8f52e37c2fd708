package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/notify"
	"github.com/pgbox/pgbox/internal/recent"
	"github.com/pgbox/pgbox/internal/telemetry"
)

const (
	// MaxAttemptsDefault is the default Config.MaxAttempts.
	MaxAttemptsDefault = 25
	// MaxPayloadBytesDefault is the default Config.MaxPayloadBytes: 1 MiB.
	MaxPayloadBytesDefault = 1 << 20
	// NotifyIntervalDefault is the default Config.NotifyInterval: 10ms.
	NotifyIntervalDefault = notify.NotifyIntervalDefault
	// RecentIDsDefault is the default Config.RecentIDs.
	RecentIDsDefault = 10_000
)

// Config configures an Inbox.
type Config struct {
	// Consumer names who consumes the messages, such as "payments" or
	// "payments.capture". Each consumer dedupes on its own: the same message
	// id may be received once by each. Required; at most MaxTextBytes bytes.
	Consumer string

	// MaxAttempts is how many times the dispatcher tries a message before
	// marking it dead. It is stored with each message when received.
	// Defaults to MaxAttemptsDefault (25).
	MaxAttempts int

	// MeterProvider receives the inbox's metrics: messages received,
	// duplicates and conflicts (see docs/operations.md). Defaults to
	// OpenTelemetry's global provider, which does nothing until one is
	// installed.
	MeterProvider metric.MeterProvider

	// NotifyInterval is how often, at most, this Inbox wakes idle
	// dispatchers: one NOTIFY per statement would make all of the service's
	// committing transactions wait in turn on PostgreSQL's notification
	// lock. Receive and ReceiveBatch announce what they stored after it
	// committed, in a notification of their own, at once or when the
	// interval since the last one is up, for everything stored meanwhile.
	// ReceiveTx puts a NOTIFY in the caller's transaction (delivered at its
	// commit) at most once per interval; statements in between are
	// announced together an interval after the last of them. Defaults to
	// NotifyIntervalDefault (10ms); -1 notifies for every statement that
	// stores something.
	//
	// The interval is per sender: every Inbox and Outbox in every process
	// on the database notifies on its own, and all of them share the lock.
	// With many senders on one busy database, raise it (the orders example
	// uses 100ms): a longer interval costs idle workers that much latency,
	// never a message.
	NotifyInterval time.Duration

	// MaxPayloadBytes is the largest payload accepted. Defaults to
	// MaxPayloadBytesDefault (1 MiB); -1 means no limit beyond PostgreSQL's
	// own 1 GB.
	MaxPayloadBytes int

	// RecentIDs is how many of the latest committed message ids (with
	// their payload hashes) this Inbox remembers, so that a redelivery of
	// one is answered Duplicate without a round trip to the database.
	// Only ids known to be committed are remembered: those Receive and
	// ReceiveBatch stored or found, and those Process committed or found;
	// not those of ReceiveTx and ReceiveBatchTx, whose transaction may yet
	// roll back. The newest stored push out the oldest; an id found already
	// stored is remembered only while there is room, so it never pushes out
	// one stored after it. A redelivery whose payload differs still goes to the
	// database, which records the conflict. Defaults to RecentIDsDefault
	// (10,000, about 1 MB); -1 remembers nothing.
	RecentIDs int

	// Schema is the PostgreSQL schema holding pgbox's tables. Defaults to
	// pgbox.DefaultSchema.
	Schema string
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, MaxPayloadBytesDefault)
	c.NotifyInterval = cmp.Or(c.NotifyInterval, NotifyIntervalDefault)
	c.RecentIDs = cmp.Or(c.RecentIDs, RecentIDsDefault)
	c.Schema = cmp.Or(c.Schema, pgbox.DefaultSchema)
	return c
}

func (c Config) validate() error {
	if err := checkText("Config.Consumer", c.Consumer, true); err != nil {
		return fmt.Errorf("inbox: %w: name the consuming service, such as \"payments\"", err)
	}
	if c.MaxAttempts < 1 {
		return fmt.Errorf("inbox: Config.MaxAttempts is %d: it must be at least 1 (or 0 for the default, %d)", c.MaxAttempts, MaxAttemptsDefault)
	}
	if c.RecentIDs < -1 {
		return fmt.Errorf("inbox: Config.RecentIDs is %d: use a positive size, 0 for the default (%d) or -1 to remember nothing", c.RecentIDs, RecentIDsDefault)
	}
	if c.NotifyInterval < 0 && c.NotifyInterval != -1 {
		return fmt.Errorf("inbox: Config.NotifyInterval is %s: use a positive interval, 0 for the default or -1 to notify every time", c.NotifyInterval)
	}
	if c.MaxPayloadBytes < -1 {
		return fmt.Errorf("inbox: Config.MaxPayloadBytes is %d: use a positive limit, 0 for the default or -1 for none", c.MaxPayloadBytes)
	}
	if err := ident.ValidateSchema(c.Schema); err != nil {
		return fmt.Errorf("inbox: Config.Schema: %w", err)
	}
	return nil
}

// Inbox receives messages for one consumer. It is safe for concurrent use.
type Inbox struct {
	cfg      Config
	channel  string
	notifies *notify.Limiter
	pool     *pgxpool.Pool
	q        queries
	recent   *recent.Set // committed ids, answered without a round trip
	// laterOrigin is 0 until a receive finds the inbox past generation 0;
	// it is then the inbox's origin day, before which a message is
	// undated and needs the probe of the earlier generations (storeOne).
	laterOrigin atomic.Int32
	tel         *telemetry.Inbox
}

type queries struct {
	hash                string
	layout              string
	logConflicts        string
	receive             string
	receiveDated        string // receive for a batch with a dated foreign id
	receiveKeyless      string
	receiveKeylessDated string
	receiveOne          string
	receiveOneDated     string
	receiveOneFirst     string
	seqName             string // the inbox's arrival sequence, as a quoted regclass
}

// New returns an Inbox for cfg.Consumer. It does not touch the database:
// a schema that is missing or at the wrong version is reported by the first
// call that needs it, with the command that fixes it.
func New(pool *pgxpool.Pool, cfg Config) (*Inbox, error) {
	if pool == nil {
		return nil, errors.New("inbox: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	channel := ident.Channel(cfg.Schema, "inbox")
	return &Inbox{
		cfg:      cfg,
		channel:  channel,
		notifies: notify.NewLimiter(cfg.NotifyInterval, func() { sendNotify(pool, channel, cfg.Consumer) }),
		pool:     pool,
		recent:   recent.New(cfg.RecentIDs),
		q: queries{
			hash:                ident.Render(hashSQL, cfg.Schema),
			layout:              ident.Render(layoutSQL, cfg.Schema),
			logConflicts:        ident.Render(logConflictsSQL, cfg.Schema),
			receive:             ident.Render(receiveSQL, cfg.Schema),
			receiveDated:        ident.Render(receiveDatedSQL, cfg.Schema),
			receiveKeyless:      ident.Render(receiveKeylessSQL, cfg.Schema),
			receiveKeylessDated: ident.Render(receiveKeylessDatedSQL, cfg.Schema),
			receiveOne:          ident.Render(receiveOneSQL, cfg.Schema),
			receiveOneDated:     ident.Render(receiveOneDatedSQL, cfg.Schema),
			receiveOneFirst:     ident.Render(receiveOneFirstSQL, cfg.Schema),
			seqName:             ident.Render("/* schema */inbox_seq", cfg.Schema),
		},
		tel: telemetry.NewInbox(cfg.MeterProvider, cfg.Consumer),
	}, nil
}

// Consumer returns the consumer this Inbox receives for.
func (in *Inbox) Consumer() string { return in.cfg.Consumer }

// Schema returns the PostgreSQL schema holding this Inbox's tables.
func (in *Inbox) Schema() string { return in.cfg.Schema }

// Channel returns the LISTEN/NOTIFY channel on which this Inbox announces
// newly stored messages, with the consumer as the payload. A dispatcher
// made for this Inbox listens on it.
func (in *Inbox) Channel() string { return in.channel }

// sendNotify sends a notification on its own, outside any receiving
// transaction, committed asynchronously (see notify.SendSQL). It is a hint:
// if it fails, polling finds the messages.
func sendNotify(pool *pgxpool.Pool, channel, payload string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = notify.Send(ctx, pool, channel, payload)
}
