package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExponential(t *testing.T) {
	t.Parallel()
	for attempt, nominal := range map[int]time.Duration{
		-3: time.Second, 0: time.Second, 1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second,
		12: 2048 * time.Second, 13: time.Hour, 62: time.Hour, 63: time.Hour, 1000: time.Hour,
	} {
		for range 200 {
			d := Exponential(attempt, time.Second, time.Hour)
			require.GreaterOrEqual(t, d, nominal/2, "attempt %d", attempt)
			require.LessOrEqual(t, d, nominal, "attempt %d", attempt)
		}
	}
}
