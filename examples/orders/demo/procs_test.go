package demo

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A process that exits before it is ready fails the run with the end of
// its log in the error, since the log's folder may not outlive the run (a
// test's temporary folder): the error says why it exited.
func TestStartFailureQuotesTheLog(t *testing.T) {
	t.Parallel()
	// 100 lines of start-up noise, then the error the process dies of.
	script := `for i in $(seq 100); do echo "line $i" >&2; done; echo "payments-1: migrate: connection refused" >&2; exit 3`
	r := &run{
		cfg:    Config{Command: func(...string) *exec.Cmd { return exec.Command("sh", "-c", script) }},
		logDir: t.TempDir(),
	}
	_, err := r.start(t.Context(), "payments-1", "payments")
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "payments-1 exited before it was ready (exit status 3): the end of its log, "+r.logDir+"/payments-1.log:")
	require.True(t, strings.HasSuffix(msg, "\n\tline 100\n\tpayments-1: migrate: connection refused"), msg)
	require.NotContains(t, msg, "line 61\n", "only the last lines")
	require.Contains(t, msg, "line 62\n")
}
