// Command inboxctl is the operator's tool for pgbox: see what the inbox
// and outbox hold, why messages failed, and replay, discard or purge them.
// Run `inboxctl --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgbox/pgbox/cmd/inboxctl/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx: a prompt ends at once, a
	// bulk change after the batch under way (exit 130). Then the signals'
	// default action comes back, so a second Ctrl-C ends the process
	// without waiting for that batch.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
