//go:build e2e

package nats_test

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// process is Debian's nats-server binary run as a separate process, so the
// restart is a real process stop and start over the same store directory.
type process struct {
	bin, store string
	port       int
	cmd        *exec.Cmd
	done       chan struct{}
}

func (p *process) start(t *testing.T) {
	t.Helper()
	if p.port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p.port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	p.cmd = exec.Command(p.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(p.port), "-js", "-sd", p.store)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr(), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on %s not ready: %v", p.addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }
func (p *process) url() string  { return "nats://" + p.addr() }

func TestE2EJetStreamOnANatsServerProcessPassesTheConformanceSuiteAcrossARestart(t *testing.T) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Fatal("nats-server is not installed; .ci/run installs Debian's nats-server package")
	}
	b := newBroker(t, &process{bin: bin, store: filepath.Join(t.TempDir(), "store")})
	sinktest.Run(t, jetStreamHarness(b, config.ContentModeBinary, true))
}
