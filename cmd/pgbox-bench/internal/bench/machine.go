package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Machine is what the figures were measured on.
type Machine struct {
	CPU               string `json:"cpu"`
	Cores             int    `json:"cores"`
	MemoryGiB         int    `json:"memory_gib"`
	Go                string `json:"go"`
	PostgreSQL        string `json:"postgresql"`
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
}

func (m Machine) String() string {
	return fmt.Sprintf("%s, %d cores, %d GiB; %s; PostgreSQL %s on the same machine (fsync %s, synchronous_commit %s)",
		m.CPU, m.Cores, m.MemoryGiB, m.Go, m.PostgreSQL, m.Fsync, m.SynchronousCommit)
}

// ReadMachine reads the machine's and the database's facts.
func ReadMachine(ctx context.Context, url string) (Machine, error) {
	m := Machine{CPU: "unknown CPU", Cores: runtime.NumCPU(), Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Fscanf(f, "MemTotal: %d kB", &kb); err == nil {
			m.MemoryGiB = (kb + 1<<19) >> 20
		}
		f.Close()
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return m, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')`).
		Scan(&m.PostgreSQL, &m.Fsync, &m.SynchronousCommit)
	return m, err
}

// ReadLoad returns the machine's one-minute load average as /proc/loadavg
// gives it ("3.42"), or "" where there is none: what else was running
// while the figures were taken.
func ReadLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(b), " ")
	return strings.TrimSpace(first)
}

// LoadDuring says what the load averages read before and after a run
// were, for the report ("load average 3.42 at the start, 5.10 at the
// end"), or "" when either is unknown.
func LoadDuring(start, end string) string {
	if start == "" || end == "" {
		return ""
	}
	return fmt.Sprintf("load average %s at the start, %s at the end", start, end)
}
