package dispatch_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/informer"
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
