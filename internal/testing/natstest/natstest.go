// Package natstest runs Debian's nats-server binary as a separate process for
// end-to-end tests, so a restart is a real process stop and start over the
// same JetStream store.
package natstest

import (
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one nats-server process with JetStream on.
type Server struct {
	t          testing.TB
	bin, store string
	host       string
	port       int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts nats-server on a free port with its store in a temporary
// directory, and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartOn(t, "127.0.0.1")
}

// StartOn is Start listening on host's IP address instead of loopback, for
// clients that cannot reach the host's loopback, such as internal/testing/nodecluster's
// pods.
func StartOn(t testing.TB, host string) *Server {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Fatal("nats-server is not installed; .ci/run installs Debian's nats-server package")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, store: filepath.Join(t.TempDir(), "store"), host: host, port: ln.Addr().(*net.TCPAddr).Port}
	ln.Close()
	s.Begin()
	t.Cleanup(s.Stop)
	return s
}

// URL is the client URL; it stays the same across restarts.
func (s *Server) URL() string { return "nats://" + s.addr() }

func (s *Server) addr() string { return net.JoinHostPort(s.host, strconv.Itoa(s.port)) }

// Begin starts the process (again) and waits until it accepts connections.
func (s *Server) Begin() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin, "-a", s.host, "-p", strconv.Itoa(s.port), "-js", "-sd", s.store)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr(), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("nats-server on %s not ready: %v", s.addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the process with SIGKILL, as a crash would.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop stops the process gracefully.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Restart stops the process and starts it again on the same port and store.
func (s *Server) Restart(t *testing.T) {
	s.Stop()
	s.Begin()
}
