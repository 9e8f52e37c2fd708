package rabbitmq

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/pgbox/pgbox/relay"
)

// dialTimeout bounds connecting to RabbitMQ, TCP and AMQP handshake; a
// connection that stops answering afterwards is closed by AMQP heartbeats
// (10 s by default, or the URL's heartbeat parameter), which ends every
// Publish call waiting on it.
const dialTimeout = 10 * time.Second

// redialAfter is how long after a failed attempt to connect the publisher
// tries again; calls meanwhile fail with that attempt's error at once, so
// that callers retrying during an outage do not storm RabbitMQ, or its
// port, with connection attempts.
const redialAfter = time.Second

// Publisher publishes to RabbitMQ with publisher confirms, on channels it
// reuses, after declaring each topic's exchange and its consumers' queues.
// It is safe for concurrent use. While RabbitMQ cannot be reached its
// errors wrap relay.ErrBrokerUnreachable, so that a relay pauses instead of
// charging its rows attempts; the next call after an outage connects
// again.
//
// It is written on amqp091-go rather than being watermill-amqp's
// publisher: that one's pool of channels loses a channel for good each
// time reopening it fails during an outage, until every Publish call
// blocks for ever, and its Close then panics on the channel it could not
// open (watermill-amqp v3.0.2; ThreeDotsLabs/watermill-amqp#37). Without
// the pool, one channel opened per call halved the relay's throughput.
// Messages are marshaled by watermill-amqp's DefaultMarshaler, as its
// subscriber expects.
type Publisher struct {
	url       string
	consumers []string
	logger    watermill.LoggerAdapter
	cfg       amqp.Config // exchange, queue and marshaler settings, as the subscriber's

	// idle holds channels that confirmed their last publish; a channel of
	// a connection that has closed since is thrown away when taken.
	idle chan *channel

	mu       sync.Mutex
	conn     *amqp091.Connection
	declared map[string]bool // topics declared on conn
	closed   bool
	dialErr  error     // the last failed attempt to connect...
	redialAt time.Time // ...and when to try again
}

// channel is a channel in confirm mode, the connection it belongs to, and
// the messages RabbitMQ returns on it.
type channel struct {
	*amqp091.Channel
	conn *amqp091.Connection
	// returns receives the messages RabbitMQ returns unroutable. Only the
	// Publish call holding the channel reads it: a channel goes back to
	// idle only after every message published on it was confirmed, and
	// RabbitMQ sends a message's return before its confirm, so no return
	// can arrive on an idle channel (see publish).
	returns chan amqp091.Return
}

// returnsBuffer is how many returns a channel holds for the Publish call
// that reads them. amqp091-go hands a return over from the goroutine that
// reads the whole connection, so a full buffer would stall every channel
// of the connection until the call reads it: publish reads returns while
// it waits for confirms, and a call that gives up drains them until the
// channel closes.
const returnsBuffer = 16

var _ relay.ResultPublisher = (*Publisher)(nil)

// NewPublisher connects to RabbitMQ at url and returns a publisher to
// topics that consumers consume. Before its first publish to a topic on a
// connection, it declares the topic's exchange and each consumer's queue,
// Queue(topic, consumer), bound to it, as SubscriberConfig declares them.
// It fails when consumers is empty or names a consumer twice, when url is
// not an AMQP URL, or when RabbitMQ cannot be reached or refuses the
// credentials.
func NewPublisher(url string, consumers []string, logger watermill.LoggerAdapter) (*Publisher, error) {
	if len(consumers) == 0 {
		return nil, errors.New("rabbitmq: no consumers: name every consumer of the topics, whose queues must exist before the first publish or RabbitMQ confirms and drops the messages")
	}
	seen := map[string]bool{}
	for _, c := range consumers {
		if c == "" || seen[c] {
			return nil, fmt.Errorf("rabbitmq: consumers %q: each must be named, once", consumers)
		}
		seen[c] = true
	}
	if _, err := amqp091.ParseURI(url); err != nil {
		return nil, fmt.Errorf("rabbitmq: the URL is not an AMQP URL (amqp://user:password@host:port/vhost): %w", err)
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	p := &Publisher{
		url:       url,
		consumers: consumers,
		logger:    logger,
		cfg:       config(url, nil),
		idle:      make(chan *channel, PublisherChannels),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.connection(); err != nil {
		return nil, err
	}
	return p, nil
}

// Publish publishes msgs to topic's exchange and returns once RabbitMQ has
// confirmed each of them, that is once each is safe in every queue bound
// to the exchange. A message's context bounds the wait for its confirm.
// Messages go out with the mandatory flag: those RabbitMQ returns because
// no queue is bound to the exchange fail the call with an
// *UnroutableError, a refusal, not an outage. If any message fails, the
// call returns the first failure that is not a return, or else one
// *UnroutableError naming every returned message; the others were
// published. A relay uses PublishResults instead, which tells them apart.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	var (
		first    error
		returned *UnroutableError
	)
	for _, err := range p.PublishResults(topic, msgs...) {
		var u *UnroutableError
		switch {
		case err == nil:
		case errors.As(err, &u):
			if returned == nil {
				returned = &UnroutableError{Topic: u.Topic, Reply: u.Reply}
			}
			returned.Messages = append(returned.Messages, u.Messages...)
		case first == nil:
			first = err
		}
	}
	if first != nil {
		return first
	}
	if returned != nil {
		return returned
	}
	return nil
}

// PublishResults publishes msgs to topic's exchange, as Publish does but
// sending them all before waiting for any confirm, and returns each
// message's error, in the order of msgs: nil for a message RabbitMQ
// confirmed and did not return, an *UnroutableError for one it returned,
// and for one it did not confirm (refused, or its channel or connection
// closed first) why; errors that say RabbitMQ could not be reached wrap
// relay.ErrBrokerUnreachable, as Publish's do.
func (p *Publisher) PublishResults(topic string, msgs ...*message.Message) []error {
	errs := make([]error, len(msgs))
	ch, err := p.channel(topic)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	sound, returned := p.publish(ch, msgs, topic, errs)
	if len(returned) > 0 {
		// The exchange had no queue bound: one of the queues this
		// publisher declared was deleted, or the exchange deleted and
		// declared again, since it declared them. Declare them again on
		// the next publish, so that the messages retried go to them.
		p.mu.Lock()
		if ch.conn == p.conn {
			delete(p.declared, topic)
		}
		p.mu.Unlock()
	}
	if !sound {
		// Nothing reads the returns once the call gives up: drain them
		// until the channel closes, so that a return still on its way
		// cannot stall the connection's reader.
		go func() {
			for range ch.returns {
			}
		}()
		_ = ch.Close()
		return errs
	}
	select {
	case p.idle <- ch:
	default:
		_ = ch.Close()
	}
	return errs
}

// publish publishes msgs to topic's exchange on ch, mandatory, without
// waiting between them, then waits for their confirms, and sets errs[i]
// to the error of msgs[i]. It reports whether ch can be used again (every
// message sent on it was confirmed, and it is open), and returns what
// RabbitMQ returned unroutable, for which errs holds *UnroutableErrors.
//
// The returns are this call's own: RabbitMQ sends a message's return
// before its confirm, on the channel it was published on, and amqp091-go
// hands both over from one goroutine in the order they came, so once a
// message's confirm is in, its return, if any, has been received or waits
// in ch.returns; and a channel is used by one call at a time, and goes
// back to idle only once every message published on it is confirmed.
func (p *Publisher) publish(ch *channel, msgs []*message.Message, topic string, errs []error) (sound bool, returned []amqp091.Return) {
	sound = true
	confirms := make([]*amqp091.DeferredConfirmation, len(msgs))
	for i, msg := range msgs {
		pub, err := p.cfg.Marshaler.Marshal(msg)
		if err != nil { // the message's own fault: nothing was sent
			errs[i] = fmt.Errorf("rabbitmq: publish to %q: message %s: %w", topic, msg.UUID, err)
			continue
		}
		if confirms[i], err = ch.PublishWithDeferredConfirmWithContext(msg.Context(), topic, "", true, false, pub); err != nil {
			// The channel is closed, or closing: the messages after this
			// one would fail the same way.
			sound = false
			for j := i; j < len(msgs); j++ {
				errs[j] = p.failed(ch.conn, fmt.Errorf("rabbitmq: publish to %q: message %s: not sent: %w", topic, msgs[j].UUID, err))
			}
			break
		}
		returned = drainReturns(ch.returns, returned)
	}
	returns := ch.returns
	for i, c := range confirms {
		if c == nil {
			continue
		}
		for waiting := true; waiting; {
			select {
			case <-c.Done():
				waiting = false
			case r, ok := <-returns:
				if !ok { // the channel closed: its confirms fail
					returns = nil
					continue
				}
				returned = append(returned, r)
			case <-msgs[i].Context().Done():
				sound = false // a confirm is still to come on ch
				errs[i] = fmt.Errorf("rabbitmq: publish to %q: message %s: waiting for its confirm: %w", topic, msgs[i].UUID, msgs[i].Context().Err())
				waiting = false
			}
		}
		switch {
		case errs[i] != nil:
		case c.Acked():
			sound = sound && !ch.IsClosed()
		case ch.IsClosed():
			// The channel closes before its unconfirmed messages are
			// failed, and the connection before its channels: failed
			// sees the outage.
			sound = false
			errs[i] = p.failed(ch.conn, fmt.Errorf("rabbitmq: publish to %q: message %s: not confirmed: the channel closed first", topic, msgs[i].UUID))
		default:
			errs[i] = fmt.Errorf("rabbitmq: publish to %q: message %s: RabbitMQ refused it (a nack: an internal error of the queue's, or a queue over its length limit with overflow reject-publish)", topic, msgs[i].UUID)
		}
	}
	returned = drainReturns(returns, returned)
	for _, r := range returned {
		e := unroutable(topic, r)
		for i, m := range msgs {
			if m.UUID == e.Messages[0] && errs[i] == nil {
				errs[i] = e
			}
		}
	}
	return sound, returned
}

// drainReturns appends to returned the returns waiting in returns.
func drainReturns(returns <-chan amqp091.Return, returned []amqp091.Return) []amqp091.Return {
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				return returned
			}
			returned = append(returned, r)
		default:
			return returned
		}
	}
}

// channel returns a channel in confirm mode on which topic is declared:
// an idle one, or a new one, on a new connection if the last one closed.
func (p *Publisher) channel(topic string) (*channel, error) {
	if ch := p.takeIdle(); ch != nil {
		if err := p.declare(ch, topic); err != nil {
			return nil, err
		}
		return ch, nil
	}
	p.mu.Lock()
	conn, err := p.connection()
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := conn.Channel()
	if err != nil {
		return nil, p.failed(conn, fmt.Errorf("rabbitmq: open a channel: %w", err))
	}
	ch := &channel{Channel: c, conn: conn, returns: c.NotifyReturn(make(chan amqp091.Return, returnsBuffer))}
	if err := c.Confirm(false); err != nil {
		_ = c.Close()
		return nil, p.failed(conn, fmt.Errorf("rabbitmq: put a channel in confirm mode: %w", err))
	}
	if err := p.declare(ch, topic); err != nil {
		return nil, err
	}
	return ch, nil
}

// takeIdle returns an idle channel that is still open, or nil.
func (p *Publisher) takeIdle() *channel {
	for {
		select {
		case ch := <-p.idle:
			if !ch.IsClosed() && !ch.conn.IsClosed() {
				return ch
			}
		default:
			return nil
		}
	}
}

// connection returns the open connection, connecting first if there is
// none or the last one closed. p.mu must be held.
func (p *Publisher) connection() (*amqp091.Connection, error) {
	if p.closed {
		return nil, fmt.Errorf("rabbitmq: %w", relay.ErrPublisherClosed)
	}
	if p.conn != nil && !p.conn.IsClosed() {
		return p.conn, nil
	}
	if time.Now().Before(p.redialAt) {
		return nil, p.dialErr
	}
	props := amqp091.NewConnectionProperties()
	props.SetClientConnectionName("pgbox publisher")
	conn, err := amqp091.DialConfig(p.url, amqp091.Config{
		Dial:       amqp091.DefaultDial(dialTimeout),
		Locale:     "en_US",
		Properties: props,
	})
	if err != nil {
		// Refused credentials or vhost count as unreachable too: no row
		// is at fault, and charging attempts would kill them all.
		p.dialErr = fmt.Errorf("%w: rabbitmq: connect: %w", relay.ErrBrokerUnreachable, err)
		p.redialAt = time.Now().Add(redialAfter)
		return nil, p.dialErr
	}
	if p.conn != nil {
		p.logger.Info("Connected to RabbitMQ again", nil)
	}
	p.conn, p.declared = conn, map[string]bool{}
	return conn, nil
}

// declare declares topic's exchange and its consumers' queues, bound to
// it, once per connection.
func (p *Publisher) declare(ch *channel, topic string) error {
	p.mu.Lock()
	done := ch.conn == p.conn && p.declared[topic]
	p.mu.Unlock()
	if done {
		return nil
	}
	err := p.declareOn(ch.Channel, topic)
	if err != nil {
		_ = ch.Close()
		return p.failed(ch.conn, err)
	}
	p.mu.Lock()
	if ch.conn == p.conn {
		p.declared[topic] = true
	}
	p.mu.Unlock()
	return nil
}

// declareOn declares topic's exchange, its consumers' queues, bound to
// it, and its marker, on ch. Declarations are idempotent; one that differs from what
// exists (a queue declared with other arguments) fails.
func (p *Publisher) declareOn(ch *amqp091.Channel, topic string) error {
	c := p.cfg
	if err := c.TopologyBuilder.ExchangeDeclare(ch, topic, c); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %q: %w", topic, err)
	}
	for _, consumer := range p.consumers {
		q := Queue(topic, consumer)
		if _, err := ch.QueueDeclare(q, c.Queue.Durable, c.Queue.AutoDelete, c.Queue.Exclusive, c.Queue.NoWait, c.Queue.Arguments); err != nil {
			return fmt.Errorf("rabbitmq: declare queue %q: %w", q, err)
		}
		if err := ch.QueueBind(q, "", topic, c.QueueBind.NoWait, c.QueueBind.Arguments); err != nil {
			return fmt.Errorf("rabbitmq: bind queue %q to exchange %q: %w", q, topic, err)
		}
	}
	// Last, once the queues are bound: see SubscriberConfig.
	return declareMarker(ch, topic)
}

// failed returns err, marked as an outage when the connection it happened
// on has closed: a channel error (a refused declaration, a nack) leaves
// the connection open and is the call's own failure.
func (p *Publisher) failed(conn *amqp091.Connection, err error) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return fmt.Errorf("rabbitmq: %w: %w", relay.ErrPublisherClosed, err)
	}
	if conn.IsClosed() && !relay.IsUnreachable(err) {
		return fmt.Errorf("%w: %w", relay.ErrBrokerUnreachable, err)
	}
	return err
}

// Close closes the connection, which ends every Publish call in progress
// with an error. Calls after Close fail.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if p.conn == nil || p.conn.IsClosed() {
		return nil
	}
	if err := p.conn.Close(); err != nil && !errors.Is(err, amqp091.ErrClosed) {
		return fmt.Errorf("rabbitmq: close: %w", err)
	}
	return nil
}
