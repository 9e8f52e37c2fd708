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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
