package failover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// cluster is a set of PostgreSQL servers of the test's own, run by a
// script: a pg_auto_failover cluster (scripts/pgaf.sh, startCluster) or a
// primary with an asynchronous standby (scripts/pgpair.sh, startPair), on
// loopback ports, in a folder of its own, stopped and deleted when the
// test ends.
type cluster struct {
	dir, script, dirEnv, url string
}

// startCluster starts a pg_auto_failover cluster, a monitor, a primary and
// a secondary (the script installs Debian's postgresql-15-auto-failover
// when it is missing and the test runs as root, and says what to do
// otherwise).
func startCluster(t *testing.T) *cluster {
	t.Helper()
	return startServers(t, "pgaf.sh", "PGBOX_PGAF_DIR")
}

// startServers runs scripts/<script> up in a folder of the test's own,
// named to the script by environment variable dirEnv, and down when the
// test ends.
func startServers(t *testing.T, script, dirEnv string) *cluster {
	t.Helper()
	// Not t.TempDir: run as root, the script hands the folder to the
	// postgres user, who must be able to reach it.
	dir, err := os.MkdirTemp("", "pgbox-"+strings.TrimSuffix(script, ".sh")+"-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	c := &cluster{dir: dir, script: filepath.Join(moduleRoot(t), "scripts", script), dirEnv: dirEnv}
	t.Cleanup(func() {
		if t.Failed() {
			c.logTails(t)
		}
		if _, err := c.run("down"); err != nil {
			t.Errorf("scripts/%s down: %v", script, err)
		}
		_ = os.RemoveAll(dir)
	})
	c.url = c.must(t, "up")
	return c
}

// must runs the script with args and returns its output, failing the
// test if it fails.
func (c *cluster) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.run(args...)
	require.NoError(t, err, "scripts/%s %s", filepath.Base(c.script), strings.Join(args, " "))
	return out
}

// switchover makes a planned switchover (scripts/pgaf.sh switchover) and
// reports whether the cluster kept every commit it acknowledged meanwhile:
// false if pg_auto_failover let the old primary commit without its
// secondary (the script's status 3), a bug of its own, not pgbox's.
func (c *cluster) switchover(t *testing.T) (kept bool) {
	t.Helper()
	_, err := c.run("switchover")
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && exit.ExitCode() == 3 {
		t.Logf("scripts/pgaf.sh switchover: %v", err)
		return false
	}
	require.NoError(t, err, "scripts/pgaf.sh switchover")
	return true
}

// run runs the script with args and returns its output.
func (c *cluster) run(args ...string) (string, error) {
	cmd := exec.Command(c.script, args...)
	cmd.Env = append(os.Environ(), c.dirEnv+"="+c.dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// logTails logs the end of each of the cluster's logs, for a failed test.
func (c *cluster) logTails(t *testing.T) {
	if filepath.Base(c.script) == "pgaf.sh" {
		if state, err := c.run("state"); err == nil {
			t.Logf("pgaf: the formation's state (name, host:port, reported, assigned):\n%s", state)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, name := range logs {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s: the end of %s:\n%s", filepath.Base(c.script), filepath.Base(name), strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

// pool opens a pool on the cluster's multi-host URL, as a service would:
// new connections find whichever node takes writes. Connections give up
// after a second (connect_timeout), so that a node that does not answer
// costs the next host a second, not the pool's whole wait.
func (c *cluster) pool(t *testing.T, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(c.url + "&connect_timeout=1")
	require.NoError(t, err)
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, pool.Ping(ctx))
	return pool
}

// moduleRoot is the nearest folder above the working directory that holds
// go.mod.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		require.NotEqual(t, dir, filepath.Dir(dir), "go.mod not found above the working directory")
		dir = filepath.Dir(dir)
	}
}
