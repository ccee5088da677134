package faults_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// A sink that can never connect, without a spool to keep its events, keeps
// the drain waiting for its whole timeout; an operator's second signal must
// end it at once. (With a spool, the default, the drain spools at once.)
func TestASecondSignalExitsAtOnceInsteadOfWaitingForTheDrain(t *testing.T) {
	ns := namespace(t)
	p := newProcs(t, ns)
	cfg := fmt.Sprintf(`apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: faults
dispatch: {drainTimeout: 5m}
resources:
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [nowhere]}
sinks:
  - name: nowhere
    type: kafka
    overflow: conflate
    kafka: {brokers: ["127.0.0.1:1"], topic: fixed}
`, ns)
	if err := os.WriteFile(p.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, _ := p.start(t, "out.jsonl")
	stderr := cmd.Stderr.(*testkit.Buffer)
	testkit.Eventually(t, "the informer to sync", func() bool { return strings.Contains(stderr.String(), "informer synced") })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the drain to begin", func() bool { return strings.Contains(stderr.String(), "shutting down; draining") })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("kubewire exited (%v) after one signal although its sink never acknowledged; the drain was skipped", err)
	case <-time.After(2 * time.Second): // the drain would last 5 minutes
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("second signal: exit %v, want code 1", err)
		}
		t.Logf("exited %s after the second signal", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("kubewire did not exit within 10s of a second signal")
	}
	if !strings.Contains(stderr.String(), "second signal") {
		t.Errorf("no log line about the second signal:\n%s", stderr.String())
	}
}
