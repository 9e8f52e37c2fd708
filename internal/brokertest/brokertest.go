// Package brokertest runs a broker of a test's own through the project's
// scripts (scripts/nats.sh, scripts/rabbitmq.sh, scripts/redis.sh, scripts/goaws.sh), in a directory of its
// own, so that the test may SIGKILL it and start it again on the same URL
// without disturbing the shared servers other tests use.
package brokertest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Script names a broker's script and the variable that moves its directory.
type Script struct {
	dirEnv string
	name   string
}

// The brokers a test can run.
var (
	// GoAWS is goaws, an Amazon SQS stand-in (scripts/goaws.sh, built
	// from the Go module proxy); its URL is the SQS endpoint.
	GoAWS = Script{dirEnv: "PGBOX_GOAWS_DIR", name: "goaws.sh"}
	// NATS is NATS JetStream (scripts/nats.sh, Debian's nats-server).
	NATS = Script{dirEnv: "PGBOX_NATS_DIR", name: "nats.sh"}
	// RabbitMQ is RabbitMQ (scripts/rabbitmq.sh, Debian's rabbitmq-server).
	RabbitMQ = Script{dirEnv: "PGBOX_RABBITMQ_DIR", name: "rabbitmq.sh"}
	// Redis is Redis (scripts/redis.sh, Debian's redis-server), which
	// fsyncs every write before it answers.
	Redis = Script{dirEnv: "PGBOX_REDIS_DIR", name: "redis.sh"}
)

// Server is a running broker of one test's own, stopped and deleted when
// the test ends.
type Server struct {
	dir    string
	script Script
	url    string
}

// Start starts a broker with script and returns it. It fails the test when
// the broker cannot be started (the script installs a missing Debian
// package when run as root, and says what to do otherwise).
func Start(tb testing.TB, script Script) *Server {
	tb.Helper()
	// Not tb.TempDir: run as root, the script hands the directory to the
	// rabbitmq user, who must be able to reach it.
	dir, err := os.MkdirTemp("", "pgbox-broker-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	s := &Server{dir: dir, script: script}
	tb.Cleanup(func() {
		if tb.Failed() {
			s.logTails(tb)
		}
		if _, err := s.run("down"); err != nil {
			tb.Errorf("brokertest: %s down: %v", script.name, err)
		}
		_ = os.RemoveAll(dir)
	})
	s.url = s.up(tb)
	return s
}

// Up starts a broker with script for a whole test binary, from TestMain,
// for the runnable Examples that find it, as a user's program would, by
// an environment variable. It returns the broker's URL and a function
// that stops the broker and deletes its directory.
func Up(script Script) (url string, down func() error, err error) {
	dir, err := os.MkdirTemp("", "pgbox-broker-")
	if err != nil {
		return "", nil, err
	}
	s := &Server{dir: dir, script: script}
	down = func() error {
		_, err := s.run("down")
		return errors.Join(err, os.RemoveAll(dir))
	}
	if s.url, err = s.run("up"); err != nil {
		return "", nil, errors.Join(fmt.Errorf("brokertest: %s up: %w", script.name, err), down())
	}
	return s.url, down, nil
}

// logTails logs the end of each of the broker's logs, for a failed test.
func (s *Server) logTails(tb testing.TB) {
	logs, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
	more, _ := filepath.Glob(filepath.Join(s.dir, "log", "*.log"))
	for _, name := range append(logs, more...) {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		tb.Logf("brokertest: the end of %s:\n%s", filepath.Base(name), strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

// URL returns the broker's URL; it is the same after Restart.
func (s *Server) URL() string { return s.url }

// Kill SIGKILLs the broker and waits until it is gone.
func (s *Server) Kill(tb testing.TB) {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, "pid"))
	if err != nil {
		tb.Fatalf("brokertest: no pid recorded: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		tb.Fatalf("brokertest: pid file: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		tb.Fatalf("brokertest: kill %d: %v", pid, err)
	}
	for deadline := time.Now().Add(30 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("brokertest: %d still runs 30s after SIGKILL", pid)
		}
	}
}

// alive reports whether process pid runs: it exists and is not a zombie
// waiting to be reaped (the scripts' servers are orphans, reaped by
// whichever process adopts them).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// Restart starts the killed broker again, on the same URL, and returns
// once it has taken connections for a while. A broker that the script saw
// listening but that died while it finished booting (RabbitMQ, restarted
// after a SIGKILL on a busy machine, was seen to) is started again, up to
// three times: a test of a client's recovery must not fail on its
// broker's.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	for try := 1; ; try++ {
		if u := s.up(tb); u != s.url {
			tb.Fatalf("brokertest: restarted on %s, not %s", u, s.url)
		}
		if s.listening() {
			return
		}
		if try == 3 {
			tb.Fatalf("brokertest: %s restarted %d times, and stopped taking connections each time", s.script.name, try)
		}
		tb.Logf("brokertest: %s stopped taking connections after its restart; starting it again", s.script.name)
	}
}

// listening reports whether the broker takes TCP connections at its URL's
// address five times in a row, 200 ms apart, waiting up to two minutes for
// that while its process lives. It is false once the process has gone.
func (s *Server) listening() bool {
	u, err := url.Parse(s.url)
	if err != nil {
		return false
	}
	for deadline, inRow := time.Now().Add(2*time.Minute), 0; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err == nil {
			_ = c.Close()
			if inRow++; inRow == 5 {
				return true
			}
			continue
		}
		inRow = 0
		if !s.processAlive() {
			return false
		}
	}
	return false
}

// processAlive reports whether the process the script recorded runs.
func (s *Server) processAlive() bool {
	b, err := os.ReadFile(filepath.Join(s.dir, "pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && alive(pid)
}

func (s *Server) up(tb testing.TB) string {
	tb.Helper()
	out, err := s.run("up")
	if err != nil {
		tb.Fatalf("brokertest: %s up: %v", s.script.name, err)
	}
	return out
}

// run runs the script with arg and returns its output's last line.
func (s *Server) run(arg string) (string, error) {
	cmd := exec.Command(filepath.Join(root(), "scripts", s.script.name), arg)
	cmd.Env = append(os.Environ(), s.script.dirEnv+"="+s.dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", errors.New(err.Error() + ": " + stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// root is the module's root: the nearest directory above the working
// directory holding go.mod.
func root() string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}
