package dispatch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
)

// spoolFor gives a new dispatcher for owner's sink a spool in dir, and
// returns UseSpool's error instead of failing on it.
func spoolFor(owner spool.Owner, rec *memsink.Sink, dir string) (*dispatch.Dispatcher, error) {
	opt := fastOptions()
	opt.BufferEvents = 10
	d := dispatch.NewDispatcher(owner.Sink, rec, opt)
	return d, d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval, Owner: owner})
}

func mustSpoolFor(t *testing.T, owner spool.Owner, rec *memsink.Sink, dir string) *dispatch.Dispatcher {
	t.Helper()
	d, err := spoolFor(owner, rec, dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// spoolEvents leaves n changes of one object (rv 1..n) in the spool in dir,
// written by owner's sink with its broker down.
func spoolEvents(t *testing.T, owner spool.Owner, dir string, n int) {
	t.Helper()
	d := mustSpoolFor(t, owner, brokerDown(), dir)
	d.Start()
	for rv := 1; rv <= n; rv++ {
		d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm0", rv)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if lost := d.Close(ctx); lost != 0 {
		t.Fatalf("closing the writer lost %d events", lost)
	}
}

// deliversAll opens the spool in dir as owner's sink and checks that it
// delivers the n changes spoolEvents left there.
func deliversAll(t *testing.T, owner spool.Owner, dir string, n int) {
	t.Helper()
	up := &memsink.Sink{}
	d := mustSpoolFor(t, owner, up, dir)
	d.Start()
	testkit.Eventually(t, strconv.Itoa(n)+" spooled events", func() bool { return len(up.Events()) >= n })
	if lost := d.Close(context.Background()); lost != 0 {
		t.Fatalf("undelivered: %d", lost)
	}
	checkEveryChange(t, up.Events(), 1, 1, n)
}

var ownerX = spool.Owner{Cluster: "cluster-a", Sink: "sink-x", Type: "kafka"}

func TestASecondDispatcherOnTheSameSpoolDirectoryIsRefusedWhileTheFirstRunsAndOpensItOnceTheFirstHasClosed(t *testing.T) {
	dir := t.TempDir()
	first := brokerDown()
	d1 := mustSpoolFor(t, ownerX, first, dir)
	d1.Start()
	for rv := 1; rv <= 50; rv++ {
		d1.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm0", rv)))
	}

	second := &memsink.Sink{}
	d2, err := spoolFor(ownerX, second, dir)
	if !errors.Is(err, spool.ErrLocked) {
		t.Fatalf("a second dispatcher on %s: UseSpool returned %v, want spool.ErrLocked", dir, err)
	}
	testkit.ErrorSays(t, err, dir, "another kubewire process", "pid "+strconv.Itoa(os.Getpid()))
	d2.Close(context.Background())
	if got := len(second.Events()); got != 0 {
		t.Fatalf("the refused dispatcher delivered %d events of the first one's spool", got)
	}

	// The first one keeps its spool, and delivers all of it.
	for rv := 51; rv <= 60; rv++ {
		d1.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm0", rv)))
	}
	first.SetDown(false)
	testkit.Eventually(t, "the first dispatcher's 60 events", func() bool { return len(first.Events()) >= 60 })
	if lost := d1.Close(context.Background()); lost != 0 {
		t.Fatalf("undelivered: %d", lost)
	}
	checkEveryChange(t, first.Events(), 1, 1, 60)

	d3 := mustSpoolFor(t, ownerX, &memsink.Sink{}, dir)
	d3.Close(context.Background())
}

// holderEnv, when set, makes the test binary a second process that holds the
// spool directory it names until its stdin closes.
const holderEnv = "KUBEWIRE_TEST_SPOOL_HOLDER"

func TestASpoolDirectoryHeldByAnotherProcessIsRefusedNamingItsPIDUntilThatProcessExits(t *testing.T) {
	if dir := os.Getenv(holderEnv); dir != "" {
		holdSpool(t, dir)
		return
	}
	dir := t.TempDir()
	holder := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	holder.Env = append(os.Environ(), holderEnv+"="+dir)
	holder.Stderr = os.Stderr
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		stdin.Close()
		<-exited
	}()
	holding := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "holding" {
				close(holding)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		exited <- holder.Wait()
	}()
	select {
	case <-holding:
	case err := <-exited:
		exited <- err
		t.Fatalf("the holder process exited before it held the spool: %v", err)
	case <-time.After(testkit.Timeout):
		t.Fatalf("the holder process did not say it held the spool within %v", testkit.Timeout)
	}

	_, err = spoolFor(ownerX, &memsink.Sink{}, dir)
	if !errors.Is(err, spool.ErrLocked) {
		t.Fatalf("UseSpool while process %d holds %s returned %v, want spool.ErrLocked", holder.Process.Pid, dir, err)
	}
	testkit.ErrorSays(t, err, dir, "another kubewire process", "pid "+strconv.Itoa(holder.Process.Pid))

	stdin.Close()
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("the holder process failed: %v", err)
		}
	case <-time.After(testkit.Timeout):
		t.Fatalf("the holder process did not exit within %v of its stdin closing", testkit.Timeout)
	}
	d, err := spoolFor(ownerX, &memsink.Sink{}, dir)
	if err != nil {
		t.Fatalf("UseSpool after the holder exited: %v", err)
	}
	d.Close(context.Background())
}

// holdSpool is the second process: it holds dir, says so on stdout, and
// lets go when its stdin closes.
func holdSpool(t *testing.T, dir string) {
	d := mustSpoolFor(t, ownerX, &memsink.Sink{}, dir)
	d.Start()
	os.Stdout.WriteString("holding\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
	d.Close(context.Background())
}

func TestASpoolWrittenForAnotherClusterOrSinkIsRefusedAndItsEventsAreNotDelivered(t *testing.T) {
	cases := []struct {
		name    string
		opener  spool.Owner
		mention []string
	}{
		{"another cluster", spool.Owner{Cluster: "cluster-b", Sink: "sink-x", Type: "kafka"},
			[]string{`cluster "cluster-a"`, `cluster "cluster-b"`}},
		{"another sink", spool.Owner{Cluster: "cluster-a", Sink: "sink-y", Type: "nats"},
			[]string{`sink "sink-x"`, `sink "sink-y"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			const n = 40
			spoolEvents(t, ownerX, dir, n)

			wrong := &memsink.Sink{}
			d, err := spoolFor(tc.opener, wrong, dir)
			if !errors.Is(err, spool.ErrOwner) {
				t.Fatalf("UseSpool as %+v of a spool of %+v returned %v, want spool.ErrOwner", tc.opener, ownerX, err)
			}
			testkit.ErrorSays(t, err, append(tc.mention, dir, "dispatch.spoolDir")...)
			d.Start()
			d.Close(context.Background())
			if got := len(wrong.Events()); got != 0 {
				t.Fatalf("%d events of %+v were delivered to %+v", got, ownerX, tc.opener)
			}
			// Refused, not consumed: the spool's own sink still gets all.
			deliversAll(t, ownerX, dir, n)
		})
	}
}

func TestASpoolLeftByAnOlderKubewireWithoutAnOwnerRecordIsAdoptedAndReplayed(t *testing.T) {
	dir := t.TempDir()
	const n = 30
	spoolEvents(t, ownerX, dir, n)
	// An older kubewire wrote no owner record.
	if err := os.Remove(filepath.Join(dir, spool.OwnerFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}

	deliversAll(t, ownerX, dir, n)

	b, err := os.ReadFile(filepath.Join(dir, spool.OwnerFile))
	if err != nil {
		t.Fatalf("the adopted spool has no owner record: %v", err)
	}
	var got struct {
		Format              int
		Cluster, Sink, Type string
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("owner record %s: %v", b, err)
	}
	if got.Format != 1 || got.Cluster != ownerX.Cluster || got.Sink != ownerX.Sink || got.Type != ownerX.Type {
		t.Fatalf("owner record %s, want format 1 and %+v", b, ownerX)
	}
	// Adopted means owned: another cluster is now refused.
	if _, err := spoolFor(spool.Owner{Cluster: "cluster-b", Sink: "sink-x"}, &memsink.Sink{}, dir); !errors.Is(err, spool.ErrOwner) {
		t.Fatalf("another cluster opening the adopted spool: %v, want spool.ErrOwner", err)
	}
}
