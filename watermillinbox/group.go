package watermillinbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pgbox/pgbox/inbox"
)

// maxGroup bounds the messages one statement stores.
const maxGroup = 500

// A group stores the messages of concurrent handler calls together: the
// calls that arrive while a store is in flight wait, and the first of
// them then stores them all in one ReceiveBatch (a group commit). One
// subscription that hands over a message at a time (its next only once
// this one is acknowledged) stores each alone, as before; many at once
// (NATS JetStream's or Kafka's subscriptions, a router's handlers) share
// a round trip and a commit. Each call still gets its own message's
// outcome, and returns only once that is committed.
//
// No goroutine of its own: a caller that finds no store in flight leads
// one; when its store is done it hands the lead to the first call that
// queued meanwhile, and returns.
type group struct {
	in *inbox.Inbox

	mu      sync.Mutex
	leading bool    // a call is storing (or about to)
	queue   []*call // waiting for the next store
}

// call is one handler call's message, and its outcome once stored.
type call struct {
	ctx  context.Context
	msg  inbox.Message
	res  inbox.Result
	lead bool          // woken to lead the next store, not with a result
	done chan struct{} // closed when res is set, or lead
}

// receive stores msg, with the messages of the calls waiting alongside,
// and returns its outcome: Receive's, as a Result. A call whose context
// ends while it waits returns the context's error at once (the broker
// delivers the message again), whether or not its store has begun.
func (g *group) receive(ctx context.Context, msg inbox.Message) inbox.Result {
	c := &call{ctx: ctx, msg: msg, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	c.lead = !g.leading
	leads := c.lead // c.lead is the leader's to set from now on
	g.leading = true
	g.mu.Unlock()
	if !leads {
		select {
		case <-c.done:
		case <-ctx.Done():
			if !g.withdraw(c) {
				return inbox.Result{Err: ctx.Err()}
			}
		}
		if !c.lead {
			return c.res
		}
	}
	// c is first in the queue: it was empty, or c was handed the lead as
	// its first.
	defer g.handOff()
	g.mu.Lock()
	n := min(len(g.queue), maxGroup)
	calls := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()
	g.store(calls)
	return c.res
}

// withdraw takes c, whose context has ended, out of the queue, if it is
// still there, and reports whether c must lead the next store all the
// same: it was handed the lead.
func (g *group) withdraw(c *call) (lead bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.lead {
		return true
	}
	for i, q := range g.queue {
		if q == c {
			g.queue = append(g.queue[:i:i], g.queue[i+1:]...)
			break
		}
	}
	return false
}

// handOff ends a leader's turn: it hands the lead to the first call
// waiting, if any, or gives it up.
func (g *group) handOff() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) > 0 {
		next := g.queue[0]
		next.lead = true
		close(next.done)
		return
	}
	g.leading = false
}

// store stores calls' messages in one ReceiveBatch and gives each call
// its result. A call whose context has ended is not stored: it gets the
// context's error, as Receive would. The statement runs until every
// other call's context has ended, deadlines and all, so that a store
// that hangs (the database gone) ends as lone Receives would, and no call
// that still waits has it cut short. Should the store panic, every call
// gets an error (and is nacked) before the panic goes on.
func (g *group) store(calls []*call) {
	defer func() {
		p := recover()
		for _, c := range calls {
			if p != nil {
				c.res = inbox.Result{Err: fmt.Errorf("watermillinbox: storing the message panicked: %v", p)}
			}
			if !c.lead { // the leader reads its own
				close(c.done)
			}
		}
		if p != nil {
			panic(p)
		}
	}()
	live := make([]*call, 0, len(calls))
	msgs := make([]inbox.Message, 0, len(calls))
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.res = inbox.Result{Err: err}
			continue
		}
		live = append(live, c)
		msgs = append(msgs, c.msg)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(live[0].ctx))
	defer cancel()
	var ended atomic.Int32
	for _, c := range live {
		stop := context.AfterFunc(c.ctx, func() {
			if int(ended.Add(1)) == len(live) {
				cancel()
			}
		})
		defer stop()
	}
	results, err := g.in.ReceiveBatch(ctx, msgs)
	for i, c := range live {
		if err != nil {
			c.res = inbox.Result{Err: err}
		} else {
			c.res = results[i]
		}
	}
}
