// Package scripts_test runs the throwaway-server scripts as a user does.
package scripts_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
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
		var out, errOut bytes.Buffer
		// The copy was just written: a process another test forked
		// meanwhile may hold it open for writing until it execs, and
		// exec then fails with ETXTBSY (golang/go#22315). That ends, so
		// start again until it has, for a while.
		for busySince := time.Now(); ; {
			cmd := exec.Command(filepath.Join(clone, "scripts", "pg.sh"), arg)
			cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PGBOX_PG_DIR=") })
			out.Reset()
			errOut.Reset()
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			if errors.Is(err, syscall.ETXTBSY) && time.Since(busySince) < 10*time.Second {
				continue
			}
			require.NoError(t, err, "pg.sh %s: %s", arg, errOut.String())
			return out.String(), errOut.String()
		}
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

// scripts/pgpair.sh runs a primary and an asynchronous standby: its URL
// reaches the primary; a commit made after detach-standby is on the
// primary alone, so that once the primary is killed and the standby
// promoted, the same URL reaches the standby, which has what it replayed
// before the detach and not that commit.
func TestPgpairShLosesWhatTheDetachedStandbyNeverGot(t *testing.T) {
	t.Parallel()
	// Not t.TempDir: run as root, the script hands the folder to the
	// postgres user, who must be able to reach it.
	dir, err := os.MkdirTemp("", "pgbox-pgpair-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	pgpair := func(t *testing.T, args ...string) string {
		t.Helper()
		cmd := exec.Command("./pgpair.sh", args...)
		cmd.Env = append(os.Environ(), "PGBOX_PGPAIR_DIR="+dir)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		require.NoError(t, cmd.Run(), "pgpair.sh %s: %s", strings.Join(args, " "), errOut.String())
		return strings.TrimSpace(out.String())
	}
	t.Cleanup(func() {
		pgpair(t, "down")
		_ = os.RemoveAll(dir)
	})
	ctx := context.Background()
	execSQL := func(t *testing.T, url, sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	rows := func(url string) ([]int, error) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, err
		}
		defer conn.Close(ctx)
		rs, err := conn.Query(ctx, "SELECT n FROM public.t ORDER BY n")
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rs, pgx.RowTo[int])
	}

	url := pgpair(t, "up")
	require.Regexp(t, regexp.MustCompile(`^postgres://postgres@127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+/pgbox\?target_session_attrs=read-write&sslmode=disable$`), url)
	require.Equal(t, url, pgpair(t, "url"))
	standby := pgpair(t, "url", "standby")
	execSQL(t, url, "CREATE TABLE public.t (n int); INSERT INTO public.t VALUES (1)")
	require.Eventually(t, func() bool {
		got, err := rows(standby)
		return err == nil && slices.Equal(got, []int{1})
	}, 30*time.Second, 20*time.Millisecond, "the standby replays the primary's commit")

	pgpair(t, "detach-standby")
	execSQL(t, url, "INSERT INTO public.t VALUES (2)")
	got, err := rows(pgpair(t, "url", "primary"))
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, got)

	pgpair(t, "kill-primary")
	pgpair(t, "promote")
	got, err = rows(url)
	require.NoError(t, err, "the URL reaches the promoted standby")
	require.Equal(t, []int{1}, got, "the commit made after the detach is lost")
}
