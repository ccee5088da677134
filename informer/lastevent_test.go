package informer

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/internal/metrics"
)

// lastEvent is the resource's kubewire_last_event_timestamp_seconds, and
// whether the series exists at all.
func lastEvent(t *testing.T, resource string) (float64, bool) {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kubewire_last_event_timestamp_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "resource" && lp.GetValue() == resource {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func stampWatcher(resource string) (*Watcher, *recording) {
	out := &recording{}
	gvr := schema.GroupVersionResource{Group: "test.kubewire.io", Version: "v1", Resource: resource}
	w := NewWatcher(Options{Cluster: "c", Out: out, Resource: config.Resource{Group: gvr.Group, Version: "v1", Resource: resource}})
	w.res = NewResource("c", gvr, "Thing", true)
	w.initialID = "snap-1"
	return w, out
}

func TestTheLastEventTimestampIsAbsentUntilTheFirstLiveChangeAndSnapshotRecordsDoNotSetIt(t *testing.T) {
	w, out := stampWatcher("stampsinitial")
	name := w.Name()
	if _, ok := lastEvent(t, name); ok {
		t.Fatal("the series exists before any change")
	}
	w.onAdd(obj("1"), true) // a record of the initial list
	if len(*out) != 1 || (*out)[0].Op != OpSynced {
		t.Fatalf("got %+v, want one synced record", *out)
	}
	if _, ok := lastEvent(t, name); ok {
		t.Fatal("a snapshot record set the last event timestamp")
	}

	before := time.Now()
	w.onUpdate(obj("1"), obj("2"))
	after := time.Now()
	got, ok := lastEvent(t, name)
	if !ok {
		t.Fatal("no series after an update")
	}
	if lo, hi := float64(before.UnixNano())/1e9, float64(after.UnixNano())/1e9; got < lo || got > hi {
		t.Fatalf("timestamp %v is not within [%v, %v]", got, lo, hi)
	}
}

func TestARawCachedResourceStampsItsLastEventOnEveryLiveChange(t *testing.T) {
	w, _ := stampWatcher("stampsraw")
	name := w.Name()
	mk := func(rv string) *raw.Object {
		o, err := raw.New([]byte(`{"apiVersion":"test.kubewire.io/v1","kind":"Thing","metadata":{"namespace":"ns","name":"a","uid":"u1","resourceVersion":"`+rv+`"}}`), raw.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	var last float64
	for i, step := range []func(){
		func() { w.onAdd(mk("1"), false) },
		func() { w.onUpdate(mk("1"), mk("2")) },
		func() { w.onDelete(mk("2")) },
	} {
		step()
		got, ok := lastEvent(t, name)
		if !ok || got < last || got == 0 {
			t.Fatalf("after change %d: timestamp %v (present %v), previous %v", i, got, ok, last)
		}
		last = got
	}
}
