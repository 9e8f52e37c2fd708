// Package scripts_test runs the throwaway-server scripts as a user does.
package scripts_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/brokertest"
)

// scripts/pg.sh, run as root from a clone inside a home the postgres user
// cannot enter (root's, mode 700, as in many containers), makes its
// cluster in a folder that user can reach, says where, links the clone's
// .pgbox/pg to it, and runs PostgreSQL there; url finds it through the
// link, and down removes both. The cluster is one of the test's own, in a
// copy of the scripts: never the one the other tests use.
func TestPgShMovesTheClusterWhereThePostgresUserReaches(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("runs only as root: pg.sh moves its cluster only when run as root, since the server then runs as the postgres user")
	}
	if _, err := user.Lookup("postgres"); err != nil {
		t.Skipf("no postgres OS user, which pg.sh runs the server as when run as root: %v", err)
	}
	home := t.TempDir()
	require.NoError(t, os.Chmod(home, 0o700))
	clone := filepath.Join(home, "pgbox")
	for _, name := range []string{"pg.sh", "lib.sh"} {
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(clone, "scripts"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(clone, "scripts", name), src, 0o755))
	}
	pgsh := func(t *testing.T, arg string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(clone, "scripts", "pg.sh"), arg)
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PGBOX_PG_DIR=") })
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		require.NoError(t, cmd.Run(), "pg.sh %s: %s", arg, errOut.String())
		return out.String(), errOut.String()
	}
	t.Cleanup(func() { pgsh(t, "down") })

	url, said := pgsh(t, "up")
	link := filepath.Join(clone, ".pgbox", "pg")
	dir, err := os.Readlink(link)
	require.NoError(t, err, "the clone's .pgbox/pg is a link to where the cluster went")
	require.Regexp(t, regexp.MustCompile(`^/var/tmp/pgbox-[0-9a-f]{12}$`), dir)
	require.Equal(t, "pg.sh: the postgres user cannot reach "+filepath.Join(clone, ".pgbox")+
		" (a private home directory?): using "+dir+" instead; "+link+" links to it\n", said)
	require.NoError(t, exec.Command("runuser", "-u", "postgres", "--", "test", "-w", dir).Run(), "the postgres user can write %s", dir)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, strings.TrimSpace(url))
	require.NoError(t, err, "the URL pg.sh printed")
	defer conn.Close(ctx)
	var dataDir string
	require.NoError(t, conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir))
	require.Equal(t, filepath.Join(dir, "data"), dataDir, "the server runs in the folder pg.sh named")

	again, _ := pgsh(t, "url")
	require.Equal(t, url, again, "url finds the cluster through the link")
	require.NoError(t, conn.Close(ctx))
	pgsh(t, "down")
	require.NoFileExists(t, link)
	require.NoDirExists(t, dir)
}

// scripts/goaws.sh builds goaws once, starts it and prints its endpoint,
// which answers; url prints the same; killed, up starts it again on the
// same URL; down stops it and deletes its folder.
func TestGoawsShUpKillUpDown(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "goaws")
	goaws := func(t *testing.T, arg string) string {
		t.Helper()
		cmd := exec.Command("./goaws.sh", arg)
		cmd.Env = append(os.Environ(), "PGBOX_GOAWS_DIR="+dir)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		require.NoError(t, cmd.Run(), "goaws.sh %s: %s", arg, errOut.String())
		return strings.TrimSpace(out.String())
	}
	t.Cleanup(func() { goaws(t, "down") })
	healthy := func(url string) bool {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && string(body) == "OK"
	}

	url := goaws(t, "up")
	require.Regexp(t, regexp.MustCompile(`^http://127\.0\.0\.1:[0-9]+$`), url)
	require.True(t, healthy(url))
	require.Equal(t, url, goaws(t, "url"))
	require.Equal(t, url, goaws(t, "up"), "up again while it runs: the same server")

	pid, err := os.ReadFile(filepath.Join(dir, "pid"))
	require.NoError(t, err)
	require.NoError(t, exec.Command("kill", "-9", strings.TrimSpace(string(pid))).Run())
	require.Eventually(t, func() bool { return !healthy(url) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, url, goaws(t, "up"), "started again on the same URL")
	require.True(t, healthy(url))

	goaws(t, "down")
	require.NoDirExists(t, dir)
	require.False(t, healthy(url))
}

// scripts/redis.sh runs Redis so that what it acknowledged survives a
// SIGKILL: the relay counts an entry Redis acknowledged as published, so
// an entry lost in a crash would be a lost message. Redis's default
// (snapshots now and then, no append-only file) loses them.
func TestRedisShKeepsWhatItAcknowledgedThroughAKill(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.Redis)
	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	const entries = 20
	for i := range entries {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: map[string]any{"n": i}}).Err())
	}
	srv.Kill(t)
	srv.Restart(t)
	n, err := rdb.XLen(ctx, "orders").Result()
	require.NoError(t, err)
	require.EqualValues(t, entries, n, "every acknowledged entry is back after the kill")
}
