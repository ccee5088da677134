// Package testkit is what kubewire's tests share: polling with a deadline,
// a free port, a test CA and a goroutine-safe buffer. Its memsink package is
// an in-memory sink that injects faults. Tests only: the binary never
// imports it, and it imports nothing of kubewire's, so that any package's
// own tests can use it.
package testkit

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timeout is how long Eventually waits.
const Timeout = time.Minute

// Eventually polls cond until it holds, failing the test after Timeout with
// a message naming what it waited for, followed by each detail.
func Eventually(t testing.TB, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	Within(t, Timeout, what, cond, detail...)
}

// Within is Eventually with its own timeout. It checks cond every 10ms, a
// deadline loop, not a synchronisation sleep.
func Within(t testing.TB, timeout time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			msg := "timed out after " + timeout.String() + " waiting for " + what
			for _, d := range detail {
				msg += ": " + d()
			}
			t.Fatal(msg)
			return // for a testing.TB whose Fatal returns
		case <-tick.C:
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on right
// now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ClosingListener listens on a free port of 127.0.0.1, closes every
// connection it accepts at once, and returns its address: a peer for tests
// that only dial. It stops when the test ends.
func ClosingListener(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}

// FreePorts returns n distinct free ports. Calling FreePort n times can
// give the same port twice, as each listener is closed before the next is
// opened; here every listener stays open until all n are chosen.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// Buffer is a goroutine-safe bytes.Buffer: a log destination a test reads
// while what it runs still writes to it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ErrorSays fails t unless err is an error whose message contains every
// part of want: the check behind every "bad input names the field, the
// value and what was expected" test.
func ErrorSays(t testing.TB, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one that says %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q:\n%v", w, err)
		}
	}
}
