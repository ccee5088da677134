package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLocked is returned when another process holds a spool directory.
var ErrLocked = errors.New("spool directory in use")

// LockFile is the lock's file name in a sink's spool directory. It holds the
// PID of the process that holds the lock, for the error another one gets.
const LockFile = "kubewire.lock"

// DirLock is an exclusive advisory lock on a spool directory. Two processes
// writing one spool corrupt it (diskqueue's metadata is per process), and
// one would deliver the other's events, so only one may use it at a time.
//
// It is a flock(2), which the kernel drops when the process dies, however it
// dies: a killed kubewire leaves no stale lock for its successor to wait on.
// A flock belongs to an open file description, so a second Lock in the same
// process is refused too.
type DirLock struct {
	f *os.File
}

// Lock takes the lock of dir without waiting, or returns an error wrapping
// ErrLocked that names dir and, when it has written it, the holder's PID.
func Lock(dir string) (*DirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, lockedError(dir)
		}
		return nil, fmt.Errorf("spool lock %s: %w", path, err)
	}
	// The PID is only for the message; the flock alone decides.
	if err := writePID(f); err != nil {
		unlock(f)
		return nil, fmt.Errorf("spool lock %s: %w", path, err)
	}
	return &DirLock{f: f}, nil
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

func lockedError(dir string) error {
	holder := "another kubewire process"
	b, _ := os.ReadFile(filepath.Join(dir, LockFile))
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
		holder += fmt.Sprintf(" (pid %d", pid)
		if pid == os.Getpid() {
			holder += ", this process"
		}
		holder += ")"
	}
	return fmt.Errorf("%w: %s is held by %s; only one kubewire may use a spool directory: stop the other one, or give this one its own dispatch.spoolDir",
		ErrLocked, dir, holder)
}

// Unlock releases the lock. The file stays: removing it would let a process
// that opened it just before lock a file that is no longer the lock.
func (l *DirLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0) // no stale PID for the next holder's rivals
	err := unlock(l.f)
	l.f = nil
	return err
}

func unlock(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return errors.Join(err, f.Close())
}
