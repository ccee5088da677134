package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
	"github.com/kubewire/kubewire/internal/wiring/verify"
)

func spooled(t *testing.T, name string, rec *memsink.Sink, dir string, maxBytes int64) *dispatch.Dispatcher {
	t.Helper()
	opt := fastOptions()
	opt.BufferEvents = 10
	d := dispatch.NewDispatcher(name, rec, opt)
	if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: maxBytes, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	return d
}

// checkEveryChange asserts that each key's events arrived in order and that
// every resourceVersion from..to of each key arrived, none folded.
func checkEveryChange(t *testing.T, evs []*encoding.Event, keys, from, to int) {
	t.Helper()
	seen := map[string][]int{}
	for _, ev := range evs {
		if ev.Type() == encoding.TypeSnapshotStarted || ev.Type() == encoding.TypeSnapshotCompleted || ev.Type() == encoding.TypeGap {
			continue
		}
		if _, ok := ev.Extensions()[encoding.ExtConflated]; ok {
			t.Fatalf("event %s is conflated; the spool should have kept every change", ev.ID())
		}
		seen[key(ev)] = append(seen[key(ev)], rvOf(ev))
	}
	for k := range keys {
		name := res.ObjectKey("ns", "cm"+strconv.Itoa(k))
		got := seen[name]
		// Duplicates are allowed (at least once), going backwards is not.
		want := from
		for i, rv := range got {
			if i > 0 && rv < got[i-1] {
				t.Fatalf("%s went from rv %d to %d", name, got[i-1], rv)
			}
			if rv == want {
				want++
			}
		}
		if want != to+1 {
			t.Fatalf("%s: rv %d missing (got %d events, last %v)", name, want, len(got), got[max(0, len(got)-3):])
		}
	}
}

func TestWithASpoolAFullBufferKeepsEveryChangeInOrder(t *testing.T) {
	rec := brokerDown()
	d := spooled(t, "spool-order", rec, t.TempDir(), 1<<30)
	d.Start()
	const keys, perKey = 5, 400
	for rv := 1; rv <= perKey; rv++ {
		if rv == perKey/2 {
			d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotStarted, "s1", 0)))
		}
		for k := range keys {
			d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm"+strconv.Itoa(k), rv)))
		}
		if rv == perKey/2 {
			d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotCompleted, "s1", 0)))
		}
	}
	// Memory holds the buffer and what the shards took; the rest is on disk.
	if q := d.Queued(); q > 10+4*7 {
		t.Fatalf("%d events queued in memory during the outage; want at most the buffer and one batch per shard", q)
	}
	testkit.Eventually(t, "the spool to hold the overflow", func() bool {
		return metrics.Sum("kubewire_spool_events", map[string]string{"sink": "spool-order"}) > 1500
	})
	if metrics.Sum("kubewire_spool_bytes", map[string]string{"sink": "spool-order"}) == 0 {
		t.Error("kubewire_spool_bytes is 0 while events are spooled")
	}
	rec.SetDown(false)
	testkit.Eventually(t, "every change", func() bool { return len(rec.Events()) >= keys*perKey+2 })
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	evs := rec.Events()
	checkEveryChange(t, evs, keys, 1, perKey)
	// The markers kept their place: each key's events before the started
	// marker are older than the ones after the completed marker.
	started, completed := -1, -1
	for i, ev := range evs {
		switch ev.Type() {
		case encoding.TypeSnapshotStarted:
			started = i
		case encoding.TypeSnapshotCompleted:
			completed = i
		}
	}
	if started < 0 || completed < started {
		t.Fatalf("markers missing or out of order: started at %d, completed at %d", started, completed)
	}
	for _, ev := range evs[:started] {
		if rvOf(ev) >= perKey/2 {
			t.Fatalf("rv %d of %s was written before the started marker enqueued ahead of it", rvOf(ev), key(ev))
		}
	}
	for _, ev := range evs[completed+1:] {
		if rvOf(ev) < perKey/2 {
			t.Fatalf("rv %d of %s was written after the completed marker enqueued behind it", rvOf(ev), key(ev))
		}
	}
	if got := metrics.Sum("kubewire_spool_events", map[string]string{"sink": "spool-order"}); got != 0 {
		t.Errorf("kubewire_spool_events is %v after the spool drained, want 0", got)
	}
}

func TestASpoolLeftAtShutdownIsDeliveredBeforeNewEventsOnTheNextStart(t *testing.T) {
	dir := t.TempDir()
	down := brokerDown()
	d1 := spooled(t, "spool-restart", down, dir, 1<<30)
	d1.Start()
	const keys = 4
	for rv := 1; rv <= 300; rv++ {
		for k := range keys {
			d1.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm"+strconv.Itoa(k), rv)))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// The broker never came back: what memory held goes to disk ahead of
	// the spool, and nothing is lost.
	if n := d1.Close(ctx); n != 0 {
		t.Fatalf("Close reported %d events neither delivered nor spooled", n)
	}
	if got := len(down.Events()); got != 0 {
		t.Fatalf("the closed gate let %d events through", got)
	}

	up := &memsink.Sink{}
	d2 := spooled(t, "spool-restart", up, dir, 1<<30)
	d2.Start()
	for rv := 301; rv <= 310; rv++ {
		for k := range keys {
			d2.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm"+strconv.Itoa(k), rv)))
		}
	}
	testkit.Eventually(t, "the spooled and the new changes", func() bool { return len(up.Events()) >= keys*310 })
	if n := d2.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	checkEveryChange(t, up.Events(), keys, 1, 310)
}

func TestAFullSpoolConflatesAndSaysSo(t *testing.T) {
	rec := brokerDown()
	conflatedBefore := metrics.Sum("kubewire_events_conflated_total", map[string]string{"sink": "spool-full"})
	d := spooled(t, "spool-full", rec, t.TempDir(), 20_000)
	d.Start()
	const keys, perKey = 3, 500
	enqueue := func(from, to int) {
		for rv := from; rv <= to; rv++ {
			for k := range keys {
				d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm"+strconv.Itoa(k), rv)))
			}
		}
	}
	enqueue(1, perKey-100)
	testkit.Eventually(t, "the spool to report full", func() bool {
		return metrics.Sum("kubewire_spool_full", map[string]string{"sink": "spool-full"}) == 1
	})
	// Changes that arrive once the spool is full are folded.
	enqueue(perKey-99, perKey)
	if metrics.Sum("kubewire_events_conflated_total", map[string]string{"sink": "spool-full"}) == conflatedBefore {
		t.Fatal("the spool is full but nothing was conflated")
	}
	rec.SetDown(false)
	testkit.Eventually(t, "the last changes", func() bool {
		n := 0
		for _, ev := range rec.Events() {
			if rvOf(ev) == perKey {
				n++
			}
		}
		return n == keys
	})
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	if checkConflatedRanges(t, rec.Events()) == 0 {
		t.Error("no event delivered says it is conflated")
	}
	last := map[string]int{}
	for _, ev := range rec.Events() {
		if rvOf(ev) <= last[key(ev)] {
			t.Fatalf("%s went from rv %d to %d", key(ev), last[key(ev)], rvOf(ev))
		}
		last[key(ev)] = rvOf(ev)
	}
	for k := range keys {
		if got := last[res.ObjectKey("ns", "cm"+strconv.Itoa(k))]; got != perKey {
			t.Errorf("cm%d ended at rv %d, want %d", k, got, perKey)
		}
	}
}

func TestACompletedMarkerSaysHowManyOfItsRecordsWereDropped(t *testing.T) {
	rec := &memsink.Sink{}
	rec.RefuseIf(func(ev *encoding.Event) bool { return key(ev) == res.ObjectKey("ns", "huge") })
	d := dispatch.NewDispatcher("incomplete", rec, fastOptions())
	d.Start()
	synced := func(name string) *dispatch.Item {
		c := change(informer.OpSynced, name, 1)
		c.SnapshotID = "s1"
		return dispatch.NewItem(c)
	}
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotStarted, "s1", 0)))
	d.Enqueue(synced("a"))
	d.Enqueue(synced("huge"))
	d.Enqueue(synced("b"))
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotCompleted, "s1", 3)))
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotStarted, "s2", 0)))
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotCompleted, "s2", 0)))
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	var marks []string
	for _, ev := range rec.Events() {
		if ev.Type() == encoding.TypeSnapshotCompleted {
			v, _ := ev.Extensions()[encoding.ExtIncomplete].(string)
			marks = append(marks, ev.Extensions()[encoding.ExtSnapshotID].(string)+"="+v)
		}
	}
	if len(marks) != 2 || marks[0] != "s1=1" || marks[1] != "s2=" {
		t.Fatalf("completed markers %v; want s1 marked incomplete=1 and s2 unmarked", marks)
	}
}

func TestAResourceWhoseWritesFailWaitsWithoutHoldingBackTheOthers(t *testing.T) {
	other := informer.NewResource("test", res.GVR.GroupResource().WithVersion("v1"), "ConfigMap", true)
	other.KeyPrefix = "widgets.example.com"
	blocked := atomic.Bool{}
	blocked.Store(true)
	rec := &memsink.Sink{}
	rec.FailIf(func(ev *encoding.Event) bool {
		return blocked.Load() && strings.HasPrefix(key(ev), other.KeyPrefix)
	})
	opt := fastOptions()
	opt.BufferEvents, opt.Lanes = 20, 2
	d := dispatch.NewDispatcher("isolate", rec, opt)
	if err := d.UseSpool(spool.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	d.Start()
	otherChange := func(name string, rv int) *dispatch.Item {
		c := change(informer.OpUpdated, name, rv)
		c.Resource, c.Key = other, other.ObjectKey("ns", name)
		return dispatch.NewItem(c)
	}
	const perKey = 200
	for rv := 1; rv <= perKey; rv++ {
		d.Enqueue(otherChange("w0", rv))
		d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm0", rv)))
		if rv == perKey/2 {
			d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotStarted, "s1", 0)))
			d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotCompleted, "s1", 0)))
		}
	}
	// The healthy resource's changes and its snapshot all arrive while the
	// other's writes keep failing.
	testkit.Eventually(t, "every change of the healthy resource", func() bool {
		n := 0
		for _, ev := range rec.Events() {
			if key(ev) == res.ObjectKey("ns", "cm0") || ev.Type() == encoding.TypeSnapshotCompleted {
				n++
			}
		}
		return n == perKey+1
	})
	testkit.Eventually(t, "kubewire_resource_blocked to name the failing resource", func() bool {
		return metrics.Sum("kubewire_resource_blocked", map[string]string{"sink": "isolate", "resource": other.KeyPrefix}) == 1
	})
	if got := metrics.Sum("kubewire_resource_blocked", map[string]string{"sink": "isolate", "resource": res.KeyPrefix}); got != 0 {
		t.Fatalf("kubewire_resource_blocked for the healthy resource is %v, want 0", got)
	}
	// Its topic appears: every one of its changes follows, in order.
	blocked.Store(false)
	testkit.Eventually(t, "the waiting resource's changes", func() bool {
		for _, ev := range rec.Events() {
			if key(ev) == other.ObjectKey("ns", "w0") && rvOf(ev) == perKey {
				return true
			}
		}
		return false
	})
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	var rvs []int
	for _, ev := range rec.Events() {
		if key(ev) == other.ObjectKey("ns", "w0") {
			rvs = append(rvs, rvOf(ev))
		}
	}
	for i, rv := range rvs {
		if rv != i+1 {
			t.Fatalf("the waiting resource's changes arrived as %v..., want 1..%d in order", rvs[:min(len(rvs), i+3)], perKey)
		}
	}
	if got := metrics.Sum("kubewire_resource_blocked", map[string]string{"sink": "isolate", "resource": other.KeyPrefix}); got != 0 {
		t.Fatalf("kubewire_resource_blocked stayed %v after the writes succeeded", got)
	}
}

// A consumer that applies the documented rule to what reached the broker
// must still hold the object whose snapshot record the broker refused.
func TestARefusedSnapshotRecordDoesNotMakeTheConsumerDeleteTheLiveObject(t *testing.T) {
	rec := &memsink.Sink{}
	rec.RefuseIf(func(ev *encoding.Event) bool {
		return key(ev) == res.ObjectKey("ns", "huge") && ev.Type() == encoding.TypeSynced
	})
	d := dispatch.NewDispatcher("refused-record", rec, fastOptions())
	d.Start()
	synced := func(id, name string) *dispatch.Item {
		c := change(informer.OpSynced, name, 1)
		c.SnapshotID = id
		return dispatch.NewItem(c)
	}
	// The object was added live, then a snapshot lists it again.
	d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "huge", 1)))
	d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "small", 1)))
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotStarted, "s1", 0)))
	d.Enqueue(synced("s1", "huge"))
	d.Enqueue(synced("s1", "small"))
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotCompleted, "s1", 2)))
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	v := verify.NewView()
	for _, ev := range rec.Events() {
		v.Apply(ev.CloudEvent())
	}
	objs := v.Objects(res.KeyPrefix)
	if _, ok := objs[res.ObjectKey("ns", "huge")]; !ok {
		t.Fatalf("the consumer deleted the live object whose snapshot record was refused; view holds %v", slices.Collect(maps.Keys(objs)))
	}
	if _, ok := objs[res.ObjectKey("ns", "small")]; !ok {
		t.Fatalf("view lost the object whose record was delivered: %v", slices.Collect(maps.Keys(objs)))
	}
}

func TestAnIncompleteCountSurvivesARestartWithItsMarkerStillSpooled(t *testing.T) {
	dir := t.TempDir()
	rec := &memsink.Sink{}
	rec.RefuseIf(func(ev *encoding.Event) bool { return key(ev) == res.ObjectKey("ns", "huge") })
	// The marker cannot be written before shutdown.
	rec.FailIf(func(ev *encoding.Event) bool { return ev.Type() == encoding.TypeSnapshotCompleted })
	refusedBefore := metrics.Sum("kubewire_events_failed_total", map[string]string{"sink": "incomplete-restart", "reason": "refused"})
	d1 := spooled(t, "incomplete-restart", rec, dir, 1<<30)
	d1.Start()
	synced := func(name string) *dispatch.Item {
		c := change(informer.OpSynced, name, 1)
		c.SnapshotID = "s1"
		return dispatch.NewItem(c)
	}
	d1.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotStarted, "s1", 0)))
	d1.Enqueue(synced("huge"))
	d1.Enqueue(synced("small"))
	d1.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotCompleted, "s1", 2)))
	testkit.Eventually(t, "the refusal", func() bool {
		return metrics.Sum("kubewire_events_failed_total", map[string]string{"sink": "incomplete-restart", "reason": "refused"}) == refusedBefore+1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if n := d1.Close(ctx); n != 0 {
		t.Fatalf("Close reported %d events neither delivered nor spooled", n)
	}

	up := &memsink.Sink{}
	d2 := spooled(t, "incomplete-restart", up, dir, 1<<30)
	d2.Start()
	testkit.Eventually(t, "the completed marker", func() bool {
		for _, ev := range up.Events() {
			if ev.Type() == encoding.TypeSnapshotCompleted {
				return true
			}
		}
		return false
	})
	if n := d2.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	for _, ev := range up.Events() {
		if ev.Type() == encoding.TypeSnapshotCompleted {
			if v, _ := ev.Extensions()[encoding.ExtIncomplete].(string); v != "1" {
				t.Fatalf("the completed marker delivered after the restart says incomplete=%q, want \"1\"", v)
			}
		}
	}
}

func TestShutdownWithTheBrokerDownSpoolsAtOnceInsteadOfWaitingOutTheDeadline(t *testing.T) {
	dir := t.TempDir()
	down := brokerDown()
	d := spooled(t, "stall", down, dir, 1<<30)
	d.Start()
	for i := range 5 {
		d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "cm"+strconv.Itoa(i), 1)))
	}
	testkit.Eventually(t, "a failed write", func() bool { return down.Writes() > 0 })
	closed := make(chan int)
	go func() { closed <- d.Close(context.Background()) }() // no deadline at all
	select {
	case n := <-closed:
		if n != 0 {
			t.Fatalf("Close reported %d events neither delivered nor spooled", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a broker that is down although the spool could keep the events")
	}
	up := &memsink.Sink{}
	d2 := spooled(t, "stall", up, dir, 1<<30)
	d2.Start()
	testkit.Eventually(t, "the spooled events", func() bool { return len(up.Events()) == 5 })
	d2.Close(context.Background())
}

func TestASinkThatReportsItsConnectionLostSpoolsAtOnceAndResumesWhenItIsBack(t *testing.T) {
	rec := &memsink.Sink{}
	opt := fastOptions()
	opt.BufferEvents = 1000
	d := dispatch.NewDispatcher("link", rec, opt)
	if err := d.UseSpool(spool.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	d.Start()
	d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm0", 1)))
	testkit.Eventually(t, "the first event", func() bool { return len(rec.Events()) == 1 })
	writtenBefore := metrics.Sum("kubewire_spool_written_total", map[string]string{"sink": "link"})
	rec.SetConnected(false)
	for rv := 2; rv <= 50; rv++ {
		d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm0", rv)))
	}
	// Nothing waits in memory, where a crash would lose it: with room for
	// 1,000 events, all 49 went to disk.
	testkit.Eventually(t, "the events to reach the spool", func() bool {
		return metrics.Sum("kubewire_spool_written_total", map[string]string{"sink": "link"})-writtenBefore == 49
	})
	if q := d.Queued(); q != 0 {
		t.Fatalf("%d events held in memory while the sink reports its connection lost", q)
	}
	rec.SetConnected(true)
	testkit.Eventually(t, "every event once the connection is back", func() bool { return len(rec.Events()) == 50 })
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	for i, ev := range rec.Events() {
		if rvOf(ev) != i+1 {
			t.Fatalf("event %d has rv %d", i, rvOf(ev))
		}
	}
}

// A sink whose broker could not be reached when kubewire started is as
// failing as one whose writes fail: what arrives goes to disk at once, where
// a kill cannot take it, and a shutdown does not wait out its deadline for a
// broker that never answered.
func TestASinkThatNeverConnectedSpoolsAtOnceAndShutdownDoesNotWaitForIt(t *testing.T) {
	dir := t.TempDir()
	opt := fastOptions()
	opt.BufferEvents = 1000
	refused := errors.New("dial tcp: connection refused")
	opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))

	never := &memsink.Sink{}
	never.RefuseConnect(refused)
	d := dispatch.NewDispatcher("never", never, opt)
	if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	d.Start()
	testkit.Eventually(t, "a failed connect", func() bool { return never.Connects() > 0 })
	writtenBefore := metrics.Sum("kubewire_spool_written_total", map[string]string{"sink": "never"})
	const n = 100
	for i := range n {
		d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm"+strconv.Itoa(i%10), i+1)))
	}
	testkit.Eventually(t, "every event on disk", func() bool {
		return metrics.Sum("kubewire_spool_written_total", map[string]string{"sink": "never"})-writtenBefore == n
	})
	if q := d.Queued(); q != 0 {
		t.Errorf("%d events held in memory, where a kill loses them, while the sink never connected", q)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if u := d.Close(ctx); u != 0 {
		t.Fatalf("Close reported %d events neither delivered nor spooled", u)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %s, waiting for a broker that never answered", took)
	}

	// Restarted into the same outage: the spool stays on disk.
	still := &memsink.Sink{}
	still.RefuseConnect(refused)
	d2 := dispatch.NewDispatcher("never", still, opt)
	if err := d2.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	d2.Start()
	testkit.Eventually(t, "three failed connects", func() bool { return still.Connects() >= 3 })
	if q := d2.Queued(); q != 0 {
		t.Errorf("a restart into the outage pulled %d spooled events back into memory", q)
	}
	d2.Close(ctx)

	// Connected, but every write fails: at most one event is read back
	// from disk to try the broker with, until it acknowledges something.
	down := brokerDown()
	d3 := dispatch.NewDispatcher("never", down, opt)
	if err := d3.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	d3.Start()
	testkit.Eventually(t, "three failed writes", func() bool { return down.Writes() >= 3 })
	if q := d3.Queued(); q > 1 {
		t.Errorf("%d spooled events were read back into memory before the broker acknowledged anything", q)
	}
	down.SetDown(false)
	testkit.Eventually(t, "every event once the broker is back", func() bool { return len(down.Events()) == n })
	if u := d3.Close(ctx); u != 0 {
		t.Fatalf("undelivered: %d", u)
	}
	last := map[string]int{}
	for _, ev := range down.Events() {
		if rv := rvOf(ev); rv <= last[key(ev)] {
			t.Fatalf("%s: rv %d after rv %d", key(ev), rv, last[key(ev)])
		} else {
			last[key(ev)] = rv
		}
	}
}

// At shutdown, what memory still holds is written to the spool ahead of
// what is on disk. If that write fails, those events are lost; when they are
// records of a snapshot whose completed marker is already on disk, the
// marker must go out marked incomplete at the next start, or a consumer
// prunes the objects whose records were lost. The failure is injected by a
// directory standing where the new segment's first data file goes.
func TestASnapshotRecordLostBecauseTheSpoolCannotBeWrittenAtShutdownMarksItsSnapshot(t *testing.T) {
	dir := t.TempDir()
	opt := fastOptions()
	opt.BufferEvents = 1000
	opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	down := brokerDown()
	d := dispatch.NewDispatcher("prepend", down, opt)
	if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	// Enqueued before Start, the window's start and records stay in memory.
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotStarted, "s1", 0)))
	for i := range 5 {
		d.Enqueue(dispatch.NewItem(synced("cm"+strconv.Itoa(i), 1, "s1")))
	}
	d.Start()
	testkit.Eventually(t, "the sink to be failing", func() bool { return down.Writes() >= 2 })
	written := metrics.Sum("kubewire_spool_written_total", map[string]string{"sink": "prepend"})
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotCompleted, "s1", 5)))
	testkit.Eventually(t, "the completed marker on disk", func() bool {
		return metrics.Sum("kubewire_spool_written_total", map[string]string{"sink": "prepend"}) > written
	})
	block := filepath.Join(dir, "configmaps", fmt.Sprintf("seg-%d.diskqueue.000000.dat", int64(1)<<40-1))
	if err := os.MkdirAll(block, 0o700); err != nil {
		t.Fatal(err)
	}
	if lost := d.Close(context.Background()); lost == 0 {
		t.Fatal("Close reported nothing lost; the injected failure did not happen")
	}
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}

	completed := replayCompleted(t, "prepend", &memsink.Sink{}, opt, dir, nil)
	if n, ok := completed.Lookup(encoding.ExtIncomplete); !ok || n != "5" {
		t.Fatalf("the completed marker carries incomplete=%q (%v) after its 5 records were lost at shutdown; want \"5\"", n, ok)
	}
}

// A gap is a marker: spooled during an outage and left at shutdown, it
// comes back on the next start once, in its place between the changes.
func TestAGapLeftInTheSpoolIsDeliveredInItsPlaceOnTheNextStart(t *testing.T) {
	dir := t.TempDir()
	down := brokerDown()
	d1 := spooled(t, "spool-gap", down, dir, 1<<30)
	d1.Start()
	const keys = 4
	enqueue := func(d *dispatch.Dispatcher, from, to int) {
		for rv := from; rv <= to; rv++ {
			for k := range keys {
				d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm"+strconv.Itoa(k), rv)))
			}
		}
	}
	enqueue(d1, 1, 50)
	d1.Enqueue(dispatch.NewItem(&informer.Change{Op: informer.OpGap, Resource: res, Key: res.KeyPrefix, Observed: time.Unix(1, 0),
		Gap: &informer.Gap{From: "50", To: "90", Reason: informer.GapExpired}}))
	enqueue(d1, 51, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if n := d1.Close(ctx); n != 0 {
		t.Fatalf("Close reported %d events neither delivered nor spooled", n)
	}

	up := &memsink.Sink{}
	d2 := spooled(t, "spool-gap", up, dir, 1<<30)
	d2.Start()
	testkit.Eventually(t, "the spooled changes and the gap", func() bool { return len(up.Events()) >= keys*100+1 })
	if n := d2.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	evs := up.Events()
	gapAt := -1
	for i, ev := range evs {
		if ev.Type() != encoding.TypeGap {
			continue
		}
		if gapAt >= 0 {
			t.Fatalf("the gap arrived twice, at %d and %d", gapAt, i)
		}
		gapAt = i
		if ev.ID() != "configmaps/gap/50-90" || !strings.Contains(string(ev.Data()), `"reason":"expired"`) {
			t.Errorf("gap read back as %s %s", ev.ID(), ev.Data())
		}
	}
	if gapAt < 0 {
		t.Fatal("the gap was not delivered")
	}
	for i, ev := range evs {
		if i == gapAt {
			continue
		}
		if rv := rvOf(ev); i < gapAt && rv > 50 || i > gapAt && rv <= 50 {
			t.Fatalf("rv %d of %s is on the wrong side of the gap", rv, key(ev))
		}
	}
	checkEveryChange(t, evs, keys, 1, 100)
}

// A drain reads its spool far faster than a broker takes it. What it moves
// into memory beyond the sink's next writes only waits there, and with
// several sinks draining their sum made the shipped binary's heap (issue 46:
// 64 MiB of events read back for two sinks, RSS above 300 MB). The reader
// stops at SpoolReadAhead, well inside bufferBytes.
func TestADrainReadsItsSpoolOnlyAFewWritesAheadOfTheSink(t *testing.T) {
	dir := t.TempDir()
	opt := fastOptions()
	opt.BufferEvents = 100_000
	opt.BufferBytes = config.DefaultBufferBytes
	open := func(name string, s *memsink.Sink) *dispatch.Dispatcher {
		d := dispatch.NewDispatcher(name, s, opt)
		if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncNever}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	const keys, size = 200, 200 << 10
	big := strings.Repeat("x", size)
	d1 := open("readahead", brokerDown())
	d1.Start()
	for k := range keys {
		c := change(informer.OpUpdated, "cm"+strconv.Itoa(k), 1)
		c.Object.(interface{ SetAnnotations(map[string]string) }).SetAnnotations(map[string]string{"big": big})
		d1.Enqueue(dispatch.NewItem(c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if n := d1.Close(ctx); n != 0 {
		t.Fatalf("Close reported %d events neither delivered nor spooled", n)
	}

	up := &memsink.Sink{}
	release := up.Block()
	defer release()
	d2 := open("readahead", up)
	d2.Start()
	// Until the sink has acknowledged a write since the start, the reader
	// moves one event at a time (a restart into an outage must not move
	// the spool into memory); let one through, then hold the sink.
	testkit.Eventually(t, "the first write", func() bool { return up.Writes() >= 1 })
	release()
	release = up.Block()
	// The reader has stopped once the spool's depth holds still across
	// more than its 250 ms recheck.
	queued := func() float64 { return metrics.Sum("kubewire_buffer_bytes", map[string]string{"sink": "readahead"}) }
	depth := func() float64 { return metrics.Sum("kubewire_spool_events", map[string]string{"sink": "readahead"}) }
	last, since := depth(), time.Now()
	testkit.Eventually(t, "the reader waiting for the sink", func() bool {
		if d := depth(); d != last {
			last, since = d, time.Now()
		}
		return queued() > 0 && time.Since(since) > time.Second
	})
	t.Logf("queued %.0f bytes, spool depth %.0f, writes %d", queued(), depth(), up.Writes())
	if q := queued(); q > dispatch.SpoolReadAhead+2*size {
		t.Errorf("the drain moved %.0f MB into memory ahead of a sink that took nothing; want at most %d MB", q/(1<<20), dispatch.SpoolReadAhead>>20)
	}
	release()
	testkit.Eventually(t, "every spooled change delivered", func() bool { return len(up.Events()) >= keys })
	if n := d2.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
}
