package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testing/testkit"
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

// With -raw the demo prints the CloudEvents themselves.
func TestTheRawDemoStreamsChurnAndCtrlCLeavesNoProcessBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	bin := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build demo: %v\n%s", err, out)
	}
	var stdout, stderr testkit.Buffer
	cmd := exec.Command(bin, "-raw")
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

// TestMakeDemoPrintsChangesForPeopleAndCtrlCEndsItCleanly runs `make demo`
// as a person does, under a pseudo-terminal (script), where Ctrl-C is
// typed, not sent to one process: the terminal signals its foreground
// process group, make and go run included.
func TestMakeDemoPrintsChangesForPeopleAndCtrlCEndsItCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("needs script(1) for a pseudo-terminal")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("needs make")
	}
	var out testkit.Buffer
	cmd := exec.Command("script", "-qec", "make demo; echo make-exit=$?", "/dev/null")
	cmd.Dir = "../../.."
	// As a person types it: not a sub-make of the `make test` that may be
	// running this test, which would print make's directory lines.
	cmd.Env = withoutMake(os.Environ())
	cmd.Stdout, cmd.Stderr = &out, &out
	keys, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// The header, the snapshot, and an update naming what it changed.
	changed := regexp.MustCompile(`(?m)^\S+\s+updated\s+\S+/demo/\S+\s+\d+\s+\S+\s+\S+\s+(data\.level|spec\.size): \d+ → \d+`)
	testkit.Within(t, 3*time.Minute, "an update row with its change", func() bool { return changed.MatchString(out.String()) },
		func() string { return out.String() })
	for _, want := range []string{"TIME", "OBJECT", "snapshot.completed", "demo: waiting for"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's screen lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), `"specversion"`) {
		t.Errorf("the demo printed raw CloudEvents by default:\n%s", out.String())
	}

	if _, err := keys.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("make demo still running 90s after Ctrl-C:\n%s", out.String())
	}
	screen := out.String()
	after := screen[strings.LastIndex(screen, "^C"):]
	if !strings.Contains(after, "make-exit=0") || strings.Contains(screen, "***") {
		t.Errorf("make demo did not exit 0 without a make error after Ctrl-C:\n%s", after)
	}
	if n := strings.Count(after, "\n"); n > 2 || !strings.Contains(after, "bye") {
		t.Errorf("want one goodbye line after Ctrl-C, got:\n%s", after)
	}
}

// withoutMake drops the variables a parent make passes to its children.
func withoutMake(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES":
			continue
		}
		out = append(out, kv)
	}
	return out
}
