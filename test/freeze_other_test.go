//go:build !linux

package test

import (
	"os"
	"syscall"
)

// freeze stops this process with SIGSTOP. Outside Linux there is no
// tgkill to send it to the calling thread (see freeze_linux_test.go): the
// calling goroutine may run on a little before the process stops.
func freeze() error { return syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
