package test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// outage is a broker that a test can take down and bring back:
// brokertest.Server (the server killed and started again) or cutProxy
// (the network to an in-process one cut).
type outage interface {
	Kill(tb testing.TB)
	Restart(tb testing.TB)
}

// cutProxy forwards TCP connections on a loopback port of its own to a
// server, and can cut them: for a broker that runs in the test's process
// and keeps nothing across a restart (pstest), an outage is the network
// to it going away, as a client sees one: every connection reset, new
// ones refused, until it comes back on the same address.
type cutProxy struct {
	to   string
	addr string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newCutProxy starts a proxy to the server at to, closed when the test
// ends.
func newCutProxy(tb testing.TB, to string) *cutProxy {
	tb.Helper()
	p := &cutProxy{to: to, conns: map[net.Conn]struct{}{}}
	p.listen(tb, "127.0.0.1:0")
	p.addr = p.ln.Addr().String()
	tb.Cleanup(func() { p.Kill(tb) })
	return p
}

// Addr is the address clients connect to.
func (p *cutProxy) Addr() string { return p.addr }

func (p *cutProxy) listen(tb testing.TB, addr string) {
	tb.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("cut proxy: listen on %s: %v", addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.forward(c)
		}
	})
}

// forward copies between c and a new connection to the server, both ways,
// until either side or Kill closes them.
func (p *cutProxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.to)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut while this one was being accepted
		p.mu.Unlock()
		_, _ = c.Close(), s.Close()
		return
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}
	p.wg.Go(func() { pipe(s, c) })
	p.wg.Go(func() { pipe(c, s) })
}

// Kill cuts every connection and refuses new ones.
func (p *cutProxy) Kill(tb testing.TB) {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as a dead host's peer sees after a while
		}
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Restart accepts connections again, on the same address.
func (p *cutProxy) Restart(tb testing.TB) {
	tb.Helper()
	p.mu.Lock()
	up := p.ln != nil
	p.mu.Unlock()
	if up {
		tb.Fatal(errors.New("cut proxy: Restart while it is up"))
	}
	p.listen(tb, p.addr)
}
