// Package logtest gives pgbox's tests a slog handler that keeps what it is
// given, so a test can require that a component said something once (and
// not once per retry).
package logtest

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Recorder is a slog.Handler that keeps every record. The zero value is
// ready; it is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Enabled reports true: every level is kept.
func (l *Recorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r.
func (l *Recorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}

// WithAttrs returns l: attributes are not kept.
func (l *Recorder) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup returns l: groups are not kept.
func (l *Recorder) WithGroup(string) slog.Handler { return l }

// Count returns how many records at level have a message containing s.
func (l *Recorder) Count(level slog.Level, s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level == level && strings.Contains(r.Message, s) {
			n++
		}
	}
	return n
}

// Records returns the records at level whose message contains s, in the
// order they were handled.
func (l *Recorder) Records(level slog.Level, s string) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.recs {
		if r.Level == level && strings.Contains(r.Message, s) {
			out = append(out, r.Clone())
		}
	}
	return out
}

// Output returns the test's output (t.Output()) for the logger of a
// component whose goroutines may outlive the test, as a Watermill
// subscriber's reads go on for a moment after Close: what is written once
// the test's cleanup has run is dropped. Written to a test that has ended,
// it would race with the testing package's own bookkeeping, which the race
// detector reports as a failure of whatever test runs then. Call it before
// making the component, so that its Close, a cleanup registered later,
// runs first.
func Output(t testing.TB) io.Writer {
	o := &output{w: t.Output()}
	t.Cleanup(func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.ended = true
	})
	return o
}

// output is Output's writer.
type output struct {
	mu    sync.Mutex
	w     io.Writer
	ended bool
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return len(p), nil
	}
	return o.w.Write(p)
}
