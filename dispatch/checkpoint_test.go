package dispatch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// A change is done for a sink only once the sink acknowledged it: spooled
// is not done, and the checkpoint of its watch stream waits for the record
// to be read back and written.
func TestASpooledChangeHoldsTheCheckpointUntilItIsReadBackAndAcknowledged(t *testing.T) {
	rec := brokerDown()
	d := spooled(t, "spool-checkpoint", rec, t.TempDir(), 1<<30)
	d.Start()
	s := informer.NewTrackedStream("0")
	defer s.Close()
	const n = 300
	for rv := 1; rv <= n; rv++ {
		c := change(informer.OpUpdated, "cm"+strconv.Itoa(rv%7), rv)
		c.Mark = s.Add(strconv.Itoa(rv), 1)
		d.Enqueue(dispatch.NewItem(c))
	}
	testkit.Eventually(t, "the spool to hold the overflow", func() bool {
		return metrics.Sum("kubewire_spool_events", map[string]string{"sink": "spool-checkpoint"}) > 200
	})
	if cp := s.Checkpoint(); cp != "0" {
		t.Fatalf("the checkpoint moved to %s while the broker acknowledged nothing", cp)
	}
	rec.SetDown(false)
	testkit.Eventually(t, "the checkpoint at the last change", func() bool { return s.Checkpoint() == strconv.Itoa(n) },
		func() string { return "checkpoint " + s.Checkpoint() })
	if u := d.Close(context.Background()); u != 0 {
		t.Fatalf("undelivered: %d", u)
	}
}

// A change folded into a newer one of its key (a full buffer conflates) is
// done when the newer one is, not before: until then its versions are
// declared nowhere.
func TestAFoldedChangeIsDoneOnlyWithTheChangeThatStandsForIt(t *testing.T) {
	rec := brokerDown()
	opt := fastOptions()
	opt.BufferEvents = 4
	d := dispatch.NewDispatcher("conflate-checkpoint", rec, opt)
	d.Start()
	s := informer.NewTrackedStream("0")
	defer s.Close()
	for rv := 1; rv <= 50; rv++ {
		c := change(informer.OpUpdated, "cm"+strconv.Itoa(rv%2), rv)
		c.Mark = s.Add(strconv.Itoa(rv), 1)
		d.Enqueue(dispatch.NewItem(c))
	}
	testkit.Eventually(t, "conflation", func() bool {
		return metrics.Sum("kubewire_events_conflated_total", map[string]string{"sink": "conflate-checkpoint"}) > 0
	})
	if cp := s.Checkpoint(); cp != "0" {
		t.Fatalf("the checkpoint moved to %s over folded changes whose newer change is not delivered", cp)
	}
	rec.SetDown(false)
	testkit.Eventually(t, "the checkpoint at the last change", func() bool { return s.Checkpoint() == "50" },
		func() string { return "checkpoint " + s.Checkpoint() })
	if u := d.Close(context.Background()); u != 0 {
		t.Fatalf("undelivered: %d", u)
	}
}

// At shutdown, what memory holds is written to the spool. A change whose
// write fails there is lost for this sink: counted, but not done, so the
// checkpoint saved after the drain stays before it and the next start
// reads it again from the apiserver. (Issue 46: the checkpoint moved past
// it.)
func TestAChangeTheSpoolFailsToKeepAtShutdownHoldsTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	opt := fastOptions()
	opt.BufferEvents = 1000
	opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	down := brokerDown()
	d := dispatch.NewDispatcher("lost-checkpoint", down, opt)
	if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	s := informer.NewTrackedStream("0")
	defer s.Close()
	add := func(rv int) {
		c := change(informer.OpUpdated, "cm"+strconv.Itoa(rv%3), rv)
		c.Mark = s.Add(strconv.Itoa(rv), 1)
		d.Enqueue(dispatch.NewItem(c))
	}
	lostToSpool := func() float64 {
		return metrics.Sum("kubewire_events_failed_total", map[string]string{"sink": "lost-checkpoint", "reason": "spool"})
	}
	before := lostToSpool() // the metrics are the process's, across -count
	// Enqueued before Start, these stay in memory.
	for rv := 1; rv <= 5; rv++ {
		add(rv)
	}
	d.Start()
	testkit.Eventually(t, "the sink to be failing", func() bool { return down.Writes() >= 2 })
	// The segment written at shutdown cannot be created: a directory
	// stands where its first data file goes.
	block := filepath.Join(dir, "configmaps", fmt.Sprintf("seg-%d.diskqueue.000000.dat", int64(1)<<40-1))
	if err := os.MkdirAll(block, 0o700); err != nil {
		t.Fatal(err)
	}
	if lost := d.Close(context.Background()); lost != 5 {
		t.Fatalf("Close reported %d events lost; want the 5 in memory", lost)
	}
	if got := lostToSpool() - before; got != 5 {
		t.Errorf("kubewire_events_failed_total{reason=spool} = %v; want 5", got)
	}
	if cp := s.Checkpoint(); cp != "0" {
		t.Fatalf("the checkpoint moved to %s past changes that were neither acknowledged nor spooled", cp)
	}
}

// A change that reaches a sink once Close has spooled what memory held
// cannot be kept: the spool is closed, or (for a resource new to the
// sink) would be one that no shutdown closes. It is counted as lost, and
// neither the checkpoint nor the spool position passes it, so that the
// next start reads it again. (Issue 46: such a change could move the
// position saved at shutdown past it.)
func TestAChangeThatArrivesAfterTheSpoolClosedHoldsTheCheckpoint(t *testing.T) {
	opt := fastOptions()
	opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	down := brokerDown()
	d := dispatch.NewDispatcher("closed-checkpoint", down, opt)
	// A sink that reports its connection lost: what arrives goes to the
	// spool at once, in every lane.
	down.SetConnected(false)
	if err := d.UseSpool(spool.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	d.Start()
	s := informer.NewTrackedStream("0")
	defer s.Close()
	other := informer.NewResource("test", res.GVR.GroupResource().WithVersion("v1"), "ConfigMap", true)
	other.KeyPrefix = "widgets.example.com"
	add := func(r *informer.Resource, rv int) {
		c := change(informer.OpUpdated, "cm"+strconv.Itoa(rv), rv)
		c.Resource, c.Key = r, r.ObjectKey("ns", c.Object.GetName())
		c.Mark = s.Add(strconv.Itoa(rv), 1)
		d.Enqueue(dispatch.NewItem(c))
	}
	written := func() float64 {
		return metrics.Sum("kubewire_spool_written_total", map[string]string{"sink": "closed-checkpoint"})
	}
	failed := func() float64 {
		return metrics.Sum("kubewire_events_failed_total", map[string]string{"sink": "closed-checkpoint", "reason": "closed"})
	}
	// The metrics are the process's, across -count: count from here.
	written0, failed0 := written(), failed()
	add(res, 1)
	testkit.Eventually(t, "the first change on disk", func() bool { return written()-written0 >= 1 })
	if lost := d.Close(context.Background()); lost != 0 {
		t.Fatalf("Close lost %d events", lost)
	}
	// One of a resource new to the sink, then one of the resource whose
	// spool is closed.
	add(other, 2)
	add(res, 3)
	testkit.Eventually(t, "the late changes spooled or counted as lost", func() bool { return written()-written0 >= 2 || failed()-failed0 >= 2 },
		func() string { return fmt.Sprintf("written %v, lost %v", written()-written0, failed()-failed0) })
	if cp, pos := s.Checkpoint(), s.SpoolPosition(); cp != "0" || pos != "1" {
		t.Fatalf("checkpoint %s and spool position %s; want 0 (nothing acknowledged) and 1 (only the first change kept)", cp, pos)
	}
	if got := failed() - failed0; got != 2 {
		t.Fatalf("kubewire_events_failed_total{reason=closed} = %v; want the 2 changes that arrived after Close", got)
	}
}
