package informer

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
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
	for i, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			// A resource per cache: the series is the process's, and must
			// be absent at the start of each case.
			w, out := stampWatcher(fmt.Sprintf("stampsinitial%d", i))
			name := w.Name()
			if _, ok := lastEvent(t, name); ok {
				t.Fatal("the series exists before any change")
			}
			w.onAdd(tc.obj(t, "1"), true) // a record of the initial list
			if len(*out) != 1 || (*out)[0].Op != OpSynced {
				t.Fatalf("got %+v, want one synced record", *out)
			}
			if _, ok := lastEvent(t, name); ok {
				t.Fatal("a snapshot record set the last event timestamp")
			}

			before := time.Now()
			w.onUpdate(tc.obj(t, "1"), tc.obj(t, "2"))
			after := time.Now()
			got, ok := lastEvent(t, name)
			if !ok {
				t.Fatal("no series after an update")
			}
			if lo, hi := float64(before.UnixNano())/1e9, float64(after.UnixNano())/1e9; got < lo || got > hi {
				t.Fatalf("timestamp %v is not within [%v, %v]", got, lo, hi)
			}
		})
	}
}

func TestEveryLiveChangeStampsTheLastEvent(t *testing.T) {
	for i, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := stampWatcher(fmt.Sprintf("stampslive%d", i))
			name := w.Name()
			mk := func(rv string) any {
				return tc.object(t, `{"apiVersion":"test.kubewire.io/v1","kind":"Thing","metadata":{"namespace":"ns","name":"a","uid":"u1","resourceVersion":"`+rv+`"}}`)
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
		})
	}
}
