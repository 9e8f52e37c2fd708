package workloop

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The stall report keeps the error of a claim that failed when another
// worker's claim then finds nothing (the rows locked by the first, or
// just let go), and drops it once a claim takes rows again.
func TestTheStallReportKeepsTheFailedClaimsError(t *testing.T) {
	t.Parallel()
	s := New(Config{
		Name:         "relay",
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		StallTimeout: time.Second,
		DueFunc: func(context.Context) (int64, time.Duration, error) {
			return 1, time.Minute, nil
		},
	})
	s.stall.progress = time.Now().Add(-time.Minute)
	claim := func(worker, claimed int, err error) {
		s.batchStarted(worker)
		s.batchEnded(worker, claimed, err)
	}

	claim(0, 1, errors.New("claim: record it: refused"))
	claim(1, 0, nil)
	s.checkStall(context.Background(), time.Now())
	require.ErrorContains(t, s.StallErr(), "waiting on: the last claim failed: claim: record it: refused; 2 claims since the last finished row took 1 rows")

	claim(0, 1, nil) // taken, and not finished yet
	s.checkStall(context.Background(), time.Now())
	require.ErrorContains(t, s.StallErr(), "waiting on: no cause known: 3 claims since the last finished row took 2 rows")
}
