package dispatch_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
)

var res = informer.NewResource("test", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)

func change(op informer.Op, name string, rv int) *informer.Change {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace("ns")
	u.SetName(name)
	u.SetUID(types.UID("uid-" + name))
	u.SetResourceVersion(strconv.Itoa(rv))
	return &informer.Change{Op: op, Resource: res, Key: res.ObjectKey("ns", name), Object: informer.FromUnstructured(u), Observed: time.Unix(1, 0)}
}

func marker(op informer.Op, id string, n int) *informer.Change {
	return &informer.Change{Op: op, Resource: res, Key: res.KeyPrefix, SnapshotID: id, Count: n, Observed: time.Unix(1, 0)}
}

// brokerDown is an in-memory sink whose broker is down until SetDown(false).
func brokerDown() *memsink.Sink {
	s := &memsink.Sink{}
	s.SetDown(true)
	return s
}

func fastOptions() dispatch.Options {
	return dispatch.Options{Shards: 4, BatchSize: 7, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond}
}

func rvOf(ev *encoding.Event) int {
	n, _ := strconv.Atoi(ev.Extensions()[encoding.ExtResourceVersion].(string))
	return n
}

func key(ev *encoding.Event) string { return ev.Extensions()[encoding.ExtPartitionKey].(string) }

// checkConflatedRanges asserts, for keys whose changes have consecutive
// resourceVersions, that a conflated event declares exactly the versions
// it stands for: conflatedfrom is the version after the key's previous
// event (1 for the first), and the count is how many versions lie between
// conflatedfrom and its own. It returns how many conflated events it saw.
func checkConflatedRanges(t *testing.T, evs []*encoding.Event) int {
	t.Helper()
	prev, n := map[string]int{}, 0
	for _, ev := range evs {
		if ev.Type() != encoding.TypeAdded && ev.Type() != encoding.TypeUpdated && ev.Type() != encoding.TypeDeleted {
			continue
		}
		k, rv := key(ev), rvOf(ev)
		if rv == prev[k] {
			continue // a retry's duplicate
		}
		count, conflated := ev.Lookup(encoding.ExtConflated)
		from, hasFrom := ev.Lookup(encoding.ExtConflatedFrom)
		switch {
		case conflated && !hasFrom:
			t.Errorf("%s at rv %d: conflated %s without conflatedfrom", k, rv, count)
		case !conflated && hasFrom:
			t.Errorf("%s at rv %d: conflatedfrom %s without conflated", k, rv, from)
		case conflated:
			n++
			f, _ := strconv.Atoi(from)
			c, _ := strconv.Atoi(count)
			if f != prev[k]+1 || c != rv-f {
				t.Errorf("%s at rv %d after rv %d: conflated %s from %s, want %d from %d", k, rv, prev[k], count, from, rv-prev[k]-1, prev[k]+1)
			}
		case rv != prev[k]+1:
			t.Errorf("%s went from rv %d to %d and does not say it folded the versions between", k, prev[k], rv)
		}
		prev[k] = rv
	}
	return n
}

func TestEachObjectsEventsArriveInOrderWhileTheSinkFailsAtRandom(t *testing.T) {
	rec := &memsink.Sink{}
	rec.FailRate(0.3)
	d := dispatch.NewDispatcher("order", rec, fastOptions())
	d.Start()
	const keys, perKey = 40, 50
	for rv := 1; rv <= perKey; rv++ {
		for k := range keys {
			d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm"+strconv.Itoa(k), rv)))
		}
	}
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("Close reported %d undelivered events, want 0", n)
	}
	last := map[string]int{}
	for _, ev := range rec.Events() {
		k, rv := key(ev), rvOf(ev)
		if rv != last[k]+1 {
			t.Fatalf("key %s: got resourceVersion %d after %d; want every change once, in order", k, rv, last[k])
		}
		last[k] = rv
	}
	if len(last) != keys {
		t.Fatalf("saw %d keys, want %d", len(last), keys)
	}
	for k, rv := range last {
		if rv != perKey {
			t.Errorf("key %s ended at %d, want %d", k, rv, perKey)
		}
	}
}

func TestSnapshotMarkersFrameTheirRecordsAcrossAllShards(t *testing.T) {
	rec := &memsink.Sink{}
	rec.FailRate(0.2)
	d := dispatch.NewDispatcher("snap", rec, fastOptions())
	d.Start()
	for i := range 20 {
		d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "before"+strconv.Itoa(i), 1)))
	}
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotStarted, "s1", 0)))
	for i := range 30 {
		c := change(informer.OpSynced, "rec"+strconv.Itoa(i), 2)
		c.SnapshotID = "s1"
		d.Enqueue(dispatch.NewItem(c))
	}
	d.Enqueue(dispatch.NewItem(marker(informer.OpSnapshotCompleted, "s1", 30)))
	for i := range 20 {
		d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "after"+strconv.Itoa(i), 3)))
	}
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	evs := rec.Events()
	if len(evs) != 72 {
		t.Fatalf("got %d events, want 72", len(evs))
	}
	started, completed := -1, -1
	for i, ev := range evs {
		switch ev.Type() {
		case encoding.TypeSnapshotStarted:
			started = i
		case encoding.TypeSnapshotCompleted:
			completed = i
		}
	}
	if started != 20 || completed != 51 {
		t.Fatalf("started at %d and completed at %d; want 20 and 51 (after every earlier event, before every later one)", started, completed)
	}
	for i, ev := range evs {
		if i == started || i == completed {
			continue
		}
		rv := rvOf(ev)
		switch {
		case i < started && rv != 1, i > started && i < completed && ev.Type() != encoding.TypeSynced, i > completed && rv != 3:
			t.Fatalf("event %d (%s rv %d) is on the wrong side of a marker", i, ev.Type(), rv)
		}
	}
}

func TestAFullBufferConflatesPerObjectAndNeverFoldsADelete(t *testing.T) {
	rec := brokerDown()
	opt := fastOptions()
	opt.BufferEvents = 10
	d := dispatch.NewDispatcher("conflate", rec, opt)
	d.Start()
	const keys, perKey = 5, 400
	for rv := 1; rv <= perKey; rv++ {
		for k := range keys {
			d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm"+strconv.Itoa(k), rv)))
		}
	}
	// A delete followed by a re-creation of one object must both survive.
	d.Enqueue(dispatch.NewItem(change(informer.OpDeleted, "cm0", perKey+1)))
	d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "cm0", perKey+2)))
	d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm0", perKey+3)))

	// While the broker is down, the queue holds about one entry per object
	// (plus what a shard had already taken), not every change.
	if q := d.Queued(); q > opt.BufferEvents+keys*2 {
		t.Fatalf("queued %d events during the outage; want at most %d", q, opt.BufferEvents+keys*2)
	}
	rec.SetDown(false)
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	last := map[string]*encoding.Event{}
	var sawDelete bool
	folded := 0
	for _, ev := range rec.Events() {
		k := key(ev)
		if p := last[k]; p != nil && rvOf(ev) <= rvOf(p) {
			t.Fatalf("key %s went from rv %d to %d", k, rvOf(p), rvOf(ev))
		}
		last[k] = ev
		if ev.Type() == encoding.TypeDeleted {
			sawDelete = true
		}
		if v, ok := ev.Extensions()[encoding.ExtConflated]; ok {
			n, _ := strconv.Atoi(v.(string))
			folded += n
		}
	}
	if !sawDelete {
		t.Fatal("the delete was folded away")
	}
	for k := range keys {
		want := perKey
		if k == 0 {
			want = perKey + 3
		}
		if got := rvOf(last[res.ObjectKey("ns", "cm"+strconv.Itoa(k))]); got != want {
			t.Errorf("cm%d ended at rv %d, want %d", k, got, want)
		}
	}
	if folded == 0 {
		t.Error("no event carried a conflated count")
	}
	checkConflatedRanges(t, rec.Events())
	if c := metrics.Sum("kubewire_events_conflated_total", map[string]string{"sink": "conflate"}); c == 0 {
		t.Error("kubewire_events_conflated_total did not move")
	}
}

func TestClosingWithABrokerDownReportsWhatWasNotDelivered(t *testing.T) {
	rec := brokerDown()
	d := dispatch.NewDispatcher("down", rec, fastOptions())
	d.Start()
	for i := range 25 {
		d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "cm"+strconv.Itoa(i), 1)))
	}
	testkit.Eventually(t, "a failed write", func() bool { return rec.Writes() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if n := d.Close(ctx); n != 25 {
		t.Fatalf("Close reported %d undelivered, want 25", n)
	}
	if d.Healthy() {
		t.Error("a sink whose writes fail reports healthy")
	}
}

func TestAPermanentlyRefusedEventIsCountedAndDoesNotStallItsShard(t *testing.T) {
	rec := &memsink.Sink{}
	rec.RefuseIf(func(ev *encoding.Event) bool { return key(ev) == res.ObjectKey("ns", "huge") })
	d := dispatch.NewDispatcher("refuse", rec, fastOptions())
	d.Start()
	before := metrics.Sum("kubewire_events_failed_total", map[string]string{"sink": "refuse", "reason": "refused"})
	d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "a", 1)))
	d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "huge", 1)))
	d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "b", 1)))
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	if got := len(rec.Events()); got != 2 {
		t.Fatalf("delivered %d events, want the 2 that were not refused", got)
	}
	if got := metrics.Sum("kubewire_events_failed_total", map[string]string{"sink": "refuse", "reason": "refused"}) - before; got != 1 {
		t.Fatalf("kubewire_events_failed_total{reason=refused} moved by %v, want 1", got)
	}
}

func rawChange(t *testing.T, name string, rv int) *informer.Change {
	t.Helper()
	js := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"ns","uid":"uid-%s","resourceVersion":"%d"},"data":{"pad":%q}}`,
		name, name, rv, strings.Repeat("x", 1000))
	o, err := raw.New([]byte(js), raw.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &informer.Change{Op: informer.OpUpdated, Resource: res, Key: res.ObjectKey("ns", name), Object: informer.FromRaw(o), Observed: time.Unix(1, 0)}
}

func TestTheByteLimitConflatesLikeTheEventLimitAndTheGaugeReturnsToZero(t *testing.T) {
	rec := brokerDown()
	opt := fastOptions()
	opt.BufferEvents = 100000 // only the byte limit can be reached
	opt.BufferBytes = 8 << 10
	d := dispatch.NewDispatcher("bytes", rec, opt)
	d.Start()
	const keys, perKey = 5, 300
	for rv := 1; rv <= perKey; rv++ {
		for k := range keys {
			d.Enqueue(dispatch.NewItem(rawChange(t, "cm"+strconv.Itoa(k), rv)))
		}
	}
	// Each change carries about 1.1 KB: without the byte limit 1,500 events
	// (about 1.7 MB) would wait; with it, about one per object plus what
	// the shards had taken before the limit was reached.
	if q, b := d.Queued(), d.QueuedBytes(); b > opt.BufferBytes+int64(keys*2)*1200 || q > 30 {
		t.Fatalf("queued %d events and %d bytes during the outage; want about %d bytes", q, b, opt.BufferBytes)
	}
	if metrics.Sum("kubewire_events_conflated_total", map[string]string{"sink": "bytes"}) == 0 {
		t.Error("the byte limit did not lead to conflation")
	}
	rec.SetDown(false)
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	if b := d.QueuedBytes(); b != 0 {
		t.Fatalf("%d bytes still counted as queued after the drain", b)
	}
	last := map[string]int{}
	for _, ev := range rec.Events() {
		last[key(ev)] = rvOf(ev)
	}
	for k := range keys {
		if got := last[res.ObjectKey("ns", "cm"+strconv.Itoa(k))]; got != perKey {
			t.Errorf("cm%d ended at rv %d, want %d", k, got, perKey)
		}
	}
}
