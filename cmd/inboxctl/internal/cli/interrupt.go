package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
)

// errInterrupted marks an error that already says what an interruption
// (Ctrl-C, SIGINT, SIGTERM) left behind; run prints it as it is and exits
// with ExitInterrupted.
var errInterrupted = errors.New("interrupted")

// confirm asks on stderr and reads the answer from stdin; only "yes", the
// whole word (in any case), goes ahead: a stray "y" typed at a prompt that
// changes thousands of messages is no answer. Piped input works too: echo yes | inboxctl replay ….
// An interruption ends the wait at once: the read goes on in the
// background, and nothing waits for it, so a prompt never holds up Ctrl-C.
// what is what the command would have done ("replayed"), for the message.
func (a *app) confirm(ctx context.Context, question, what string) error {
	fmt.Fprintf(a.errOut, "%s Type yes to continue: ", question)
	type reply struct {
		line string
		err  error
	}
	replies := make(chan reply, 1)
	go func() {
		line, err := bufio.NewReader(a.in).ReadString('\n')
		replies <- reply{line, err}
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(a.errOut)
		return fmt.Errorf("%w at the prompt: nothing was %s", errInterrupted, what)
	case r := <-replies:
		answer := strings.ToLower(strings.TrimSpace(r.line))
		if r.err != nil && answer == "" {
			fmt.Fprintln(a.errOut)
		}
		switch answer {
		case "yes":
			return nil
		case "y":
			return fmt.Errorf("not confirmed: type yes, the whole word; nothing was %s", what)
		}
		return fmt.Errorf("not confirmed: nothing was %s", what)
	}
}

// batches runs a bulk change's batches so that an interruption stops it
// between two batches, never inside one: ctx is the batches' context,
// which an interruption does not cancel, and report, passed as the
// change's progress func, cancels it once the batch that just committed
// has been counted. The count the change returns is then exactly what it
// changed; canceling a statement in flight could not say whether it
// committed.
type batches struct {
	ctx         context.Context
	interrupted func() bool
	open        bool // a progress line is on the terminal, not ended
	show        func(done int64)
	stop        context.CancelFunc
}

// startBatches prepares a bulk change of total rows under the command's
// context, showing progress ("Replayed 1,000 of 3,000") on a terminal.
func (a *app) startBatches(ctx context.Context, verb string, total int64) *batches {
	inner, stop := context.WithCancel(context.WithoutCancel(ctx))
	b := &batches{ctx: inner, interrupted: func() bool { return ctx.Err() != nil }, stop: stop}
	if isTerminal(a.errOut) {
		b.show = func(done int64) {
			fmt.Fprintf(a.errOut, "\r%s %s of %s", verb, count(done), count(total))
			b.open = done < total
			if !b.open {
				fmt.Fprintln(a.errOut)
			}
		}
	}
	return b
}

// report is the change's progress func: it shows progress and stops the
// change after this batch when the command has been interrupted.
func (b *batches) report(done int64) {
	if b.show != nil {
		b.show(done)
	}
	if b.interrupted() {
		b.stop()
	}
}

// end releases the batches' context and ends the progress line, so that
// what follows starts on a line of its own.
func (a *app) endBatches(b *batches) {
	b.stop()
	if b.open {
		fmt.Fprintln(a.errOut)
	}
}

// finishedDespite notes a bulk change that an interruption did not stop
// because it came during the change's last batch: nothing was left (the
// admin call returned no error), so the change is complete. It says so on
// stderr, and the run ends with ExitOK, as had there been no Ctrl-C.
func (a *app) finishedDespite(b *batches, past string) {
	if !b.interrupted() {
		return
	}
	a.finished = true
	fmt.Fprintf(a.errOut, "inboxctl: the interruption came during the last batch: nothing is left to be %s, the change is complete.\n", past)
}

// interruptedChange reports a bulk change an interruption stopped part
// way: the exact count changed on stdout, on a line of its own (or r as
// JSON), and on stderr that running the same command again finishes the
// change, with resume saying why that is safe. noun names what changed.
func (a *app) interruptedChange(output string, r changeReport, past, noun, resume string) error {
	r.Interrupted = true
	text := fmt.Sprintf("%s %s of %s before the interruption.", capitalize(past), count(r.Changed), plural(r.Matched, noun))
	if err := a.printReport(output, r, text); err != nil {
		return err
	}
	return fmt.Errorf("%w: run the same command again to finish: %s", errInterrupted, resume)
}
