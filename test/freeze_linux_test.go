package test

import (
	"runtime"
	"syscall"
)

// freeze stops this process with SIGSTOP, sent to the calling thread.
//
// Sent to the process (kill), SIGSTOP is taken by a thread the kernel
// picks, and the others run on until that one has been scheduled and has
// stopped them: the goroutine that sent it may return in the meantime.
// The relay-pause child sent it so from inside Publish, and under load its
// relay went on to record the publish before the process stopped (issue
// 30: the relay said "published 10", then its rows were published, not
// running, when it was killed). Sent to the calling thread (tgkill), the
// signal is taken as that thread leaves the system call: it stops there,
// its stop stops the others, and Publish never returns.
func freeze() error {
	runtime.LockOSThread() // the thread that sends the signal is the one that takes it; never unlocked
	return syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
