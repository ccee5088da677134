package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testkit"
)

// children lists the PIDs whose parent is pid.
func children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state, ppid, ...
		rest := string(stat[bytes.LastIndexByte(stat, ')')+2:])
		fields := strings.Fields(rest)
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// A zombie has exited; it only waits to be reaped.
	return !strings.Contains(string(stat), ") Z ")
}

func TestTheDemoStreamsChurnAndCtrlCLeavesNoProcessBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	bin := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build demo: %v\n%s", err, out)
	}
	var stdout, stderr testkit.Buffer
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Wait for live changes (not just the initial snapshot) to stream.
	var kids []int
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(stdout.String(), `"type":"io.kubewire.object.added"`) ||
		!strings.Contains(stdout.String(), `"type":"io.kubewire.object.updated"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no live events after 90s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
		if k := children(cmd.Process.Pid); len(k) > len(kids) {
			kids = k
		}
		time.Sleep(50 * time.Millisecond)
	}
	if k := children(cmd.Process.Pid); len(k) > len(kids) {
		kids = k
	}
	if len(kids) < 2 {
		t.Fatalf("expected etcd and kube-apiserver as children, found %v", kids)
	}
	if !strings.Contains(stdout.String(), `"type":"io.kubewire.snapshot.completed"`) {
		t.Error("no snapshot.completed marker in the demo stream")
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("demo exited with %v after Ctrl-C\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("demo still running 60s after Ctrl-C\nstderr:\n%s", stderr.String())
	}
	for _, pid := range kids {
		if alive(pid) {
			t.Errorf("child process %d is still running after the demo exited", pid)
		}
	}
}
