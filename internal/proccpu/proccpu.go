// Package proccpu reads how much CPU time PostgreSQL's processes on this
// machine have used, from Linux's /proc, for the benchmarks that report
// the database's CPU per message beside their own.
package proccpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// tick is a clock tick of /proc's times: Linux shows user space 100 a
// second, whatever its kernel's HZ.
const tick = 10 * time.Millisecond

// Postgres returns the CPU time (user and system) the PostgreSQL process
// pid has used, and false when no PostgreSQL process of that pid runs on
// this machine.
func Postgres(pid int) (time.Duration, bool) {
	p := "/proc/" + strconv.Itoa(pid)
	cmd, err := os.ReadFile(p + "/cmdline")
	if err != nil || !strings.HasPrefix(string(cmd), "postgres") {
		return 0, false
	}
	return used(p + "/stat")
}

// AllPostgres returns the CPU time (user and system) every PostgreSQL
// process on this machine has used, backends and background processes
// alike, those running now; 0 where there is none.
func AllPostgres() time.Duration {
	paths, _ := filepath.Glob("/proc/[0-9]*")
	var all time.Duration
	for _, p := range paths {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		if t, ok := Postgres(pid); ok {
			all += t
		}
	}
	return all
}

// used returns the CPU time in the /proc stat file at path, and false if
// it cannot be read (the process has exited).
func used(path string) (time.Duration, bool) {
	stat, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// The fields after the command's closing parenthesis, from the 3rd:
	// utime and stime are the 14th and 15th.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * tick, true
}
