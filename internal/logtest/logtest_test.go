package logtest_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/logtest"
)

// ended is a test whose cleanup the caller runs, and whose output it reads.
type ended struct {
	testing.TB
	out      bytes.Buffer
	cleanups []func()
}

func (e *ended) Output() io.Writer { return &e.out }
func (e *ended) Cleanup(f func())  { e.cleanups = append(e.cleanups, f) }

// What a component's goroutine writes to Output once its test's cleanup
// has run is dropped, not written to the ended test.
func TestOutputDropsWritesAfterTheTestsCleanup(t *testing.T) {
	e := &ended{TB: t}
	w := logtest.Output(e)
	_, err := io.WriteString(w, "during the test\n")
	require.NoError(t, err)
	for _, f := range e.cleanups {
		f()
	}
	n, err := io.WriteString(w, "after the test\n")
	require.NoError(t, err)
	require.Equal(t, 15, n, "a dropped write still reports itself written, so that a logger does not complain")
	require.Equal(t, "during the test\n", e.out.String())
}
