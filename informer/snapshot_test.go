package informer

import (
	"slices"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// resourceVersions lists the Op and resourceVersion of every change of key.
func resourceVersions(changes []*Change, key string) (ops []string, rvs []int) {
	for _, c := range changes {
		if c.Key != key {
			continue
		}
		rv := objectRV(c)
		n, _ := strconv.Atoi(rv)
		ops = append(ops, string(c.Op)+"@"+rv)
		rvs = append(rvs, n)
	}
	return ops, rvs
}

func TestASnapshotTakenWhileUpdatesAreQueuedBehindASlowHandlerNeverGoesBackwards(t *testing.T) {
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPIServer(t, "1", configMapJSON("a", "1"))
			out := &syncOutput{}
			w := fakeWatcher(t, f, tc.cache, out)
			var g gate
			w.handleHook = g.wait
			stop := runWatcher(t, w)

			// The handler is held; client-go's store moves on to rv 3 while
			// the notifications for rv 2 and 3 wait in the listener's queue.
			g.close()
			f.modify(t, "a", "2")
			f.modify(t, "a", "3")
			testkit.Eventually(t, "the store to hold rv 3", func() bool { return storedRV(w, "a") == "3" })
			w.Snapshot()
			g.open()
			testkit.Eventually(t, "the update to rv 3", func() bool {
				ops, _ := resourceVersions(out.changes(), "configmaps/ns/a")
				return len(ops) > 0 && ops[len(ops)-1] == "updated@3"
			})
			_ = stop()

			ops, rvs := resourceVersions(out.changes(), "configmaps/ns/a")
			synced := 0
			for i := range rvs {
				if i > 0 && rvs[i] < rvs[i-1] {
					t.Fatalf("resourceVersion went backwards at %d: %v", i, ops)
				}
				if ops[i][:len("synced")] == "synced" {
					synced++
				}
			}
			if synced != 2 {
				t.Fatalf("got %v, want the initial and the periodic synced record", ops)
			}
			t.Logf("stream of the key: %v", ops)
		})
	}
}

func TestASnapshotListsTheStateTheHandlerLastSawWhateverOperationsAreEmitted(t *testing.T) {
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			w, out := listenerFor(config.OpDeleted)
			gone := tc.named(t, "gone", "1")
			w.onAdd(tc.obj(t, "1"), false)
			w.onUpdate(tc.obj(t, "1"), tc.obj(t, "2"))
			w.onAdd(gone, false)
			w.onDelete(cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: gone})
			*out = nil
			w.Snapshot()
			ops, _ := resourceVersions(*out, "configmaps/ns/cm")
			if len(*out) != 3 || len(ops) != 1 || ops[0] != "synced@2" {
				t.Fatalf("got %d changes, %v for the live object; want started, synced@2, completed", len(*out), ops)
			}
		})
	}
}

// trackingOutput is a recording Output that reports a snapshot pending
// while pending is set.
type trackingOutput struct {
	recording
	pending bool
	asked   []string
}

func (o *trackingOutput) SnapshotPending(keyPrefix string) bool {
	o.asked = append(o.asked, keyPrefix)
	return o.pending
}

func TestAPeriodicSnapshotWaitsUntilThePreviousOneIsWrittenToEverySink(t *testing.T) {
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			out := &trackingOutput{pending: true}
			w := NewWatcher(Options{Cluster: "c", Out: out, Resource: config.Resource{Version: "v1", Resource: "configmaps"}})
			w.res = NewResource("c", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)
			w.onAdd(tc.obj(t, "1"), false)
			out.recording = nil
			deferred := testutil.ToFloat64(metrics.SnapshotsDeferred.WithLabelValues("configmaps"))

			if !w.periodicSnapshot(false) || !w.periodicSnapshot(true) {
				t.Fatal("a snapshot started while the previous one was pending")
			}
			if len(out.recording) != 0 {
				t.Fatalf("a deferred snapshot enqueued %d changes", len(out.recording))
			}
			if got := testutil.ToFloat64(metrics.SnapshotsDeferred.WithLabelValues("configmaps")) - deferred; got != 2 {
				t.Errorf("kubewire_snapshots_deferred_total moved by %v, want 2", got)
			}
			if len(out.asked) == 0 || out.asked[0] != "configmaps" {
				t.Errorf("asked about %v, want the resource's key prefix", out.asked)
			}

			out.pending = false
			if w.periodicSnapshot(true) {
				t.Fatal("the snapshot was deferred with nothing pending")
			}
			if len(out.recording) != 3 || out.recording[0].Op != OpSnapshotStarted || out.recording[2].Op != OpSnapshotCompleted {
				t.Fatalf("got %d changes, want started, one record, completed", len(out.recording))
			}
		})
	}
}

// markers lists the snapshot markers of changes as "op@snapshotRV".
func markers(changes []*Change) []string {
	var out []string
	for _, c := range changes {
		if c.Op == OpSnapshotStarted || c.Op == OpSnapshotCompleted {
			out = append(out, string(c.Op)+"@"+c.SnapshotRV)
		}
	}
	return out
}

func TestSnapshotMarkersCarryTheResourceVersionOfTheirListNotOnlyOfTheirObjects(t *testing.T) {
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			// The list is at 5, its one object last changed at 1: a delete
			// at 3 left no object behind, so only the list's version
			// says the window holds the state at 5 rather than at 1.
			f := newFakeAPIServer(t, "5", configMapJSON("a", "1"))
			out := &syncOutput{}
			w := fakeWatcher(t, f, tc.cache, out)
			stop := runWatcher(t, w)
			testkit.Eventually(t, "the initial snapshot's completed marker", func() bool { return len(markers(out.changes())) == 2 })
			f.modify(t, "a", "7")
			testkit.Eventually(t, "the update to rv 7", func() bool {
				ops, _ := resourceVersions(out.changes(), "configmaps/ns/a")
				return len(ops) > 0 && ops[len(ops)-1] == "updated@7"
			})
			w.Snapshot()
			_ = stop()
			// The initial started marker goes out before the list is read:
			// it knows no version yet.
			want := []string{"started@", "completed@5", "started@7", "completed@7"}
			if got := markers(out.changes()); !slices.Equal(got, want) {
				t.Fatalf("markers %v, want %v", got, want)
			}
		})
	}
}
