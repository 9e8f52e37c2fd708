package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// cluster is a PostgreSQL cluster of the suite's own: the suite restarts it
// in immediate mode, which must not disturb the other tests' cluster.
type cluster struct {
	dir, script, url string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	root, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		require.NotEqual(t, root, filepath.Dir(root), "go.mod not found")
		root = filepath.Dir(root)
	}
	c := &cluster{dir: filepath.Join(root, ".pgbox", "chaos-pg"), script: filepath.Join(root, "scripts", "pg.sh")}
	c.url = strings.TrimSpace(c.run(t, "up"))
	t.Cleanup(func() { c.run(t, "down") })
	return c
}

func (c *cluster) run(t *testing.T, cmd string) string {
	t.Helper()
	command := exec.Command(c.script, cmd)
	command.Env = append(os.Environ(), "PGBOX_PG_DIR="+c.dir)
	out, err := command.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "scripts/pg.sh %s: %s", cmd, stderr)
	return string(out)
}

// crashRestart restarts the server in immediate mode: every session is cut,
// nothing is checkpointed, recovery replays the WAL.
func (c *cluster) crashRestart(t *testing.T) { c.run(t, "crash-restart") }

func (c *cluster) pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(c.url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "chaos driver"
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
