package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// foreground moves the demo into a process group of its own and makes it
// the terminal's foreground group, so that Ctrl-C reaches the demo alone.
// Without it, Ctrl-C also reaches make (and go run), which end on the
// signal, and make reports an error however cleanly the demo stopped. The
// demo's children, etcd and kube-apiserver, have groups of their own
// already; the demo stops them. restore gives the terminal back.
//
// Without a controlling terminal, or when the demo is not in the
// foreground (a background job, a test), it changes nothing.
func foreground() (restore func()) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return func() {}
	}
	fd := int(tty.Fd())
	orig, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || orig != unix.Getpgrp() {
		tty.Close()
		return func() {}
	}
	// A process outside the foreground group that sets it is sent SIGTTOU.
	signal.Ignore(syscall.SIGTTOU)
	if err := unix.Setpgid(0, 0); err != nil {
		tty.Close()
		return func() {}
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpgrp()); err != nil {
		_ = unix.Setpgid(0, orig)
		tty.Close()
		return func() {}
	}
	return func() {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, orig)
		tty.Close()
	}
}
