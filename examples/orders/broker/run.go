package broker

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Run starts router and returns once it is running, with the function that
// stops it and returns what its run ended with. name says whose router it
// is in the error when the run ends at once.
func Run(ctx context.Context, name string, router *message.Router) (stop func() error, err error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	stop = func() error {
		cancel()
		return <-done
	}
	select {
	case <-router.Running():
		return stop, nil
	case err := <-done:
		cancel()
		return nil, errors.Join(errors.New(name+": subscription ended at once"), err)
	case <-ctx.Done():
		_ = stop()
		return nil, ctx.Err()
	}
}
