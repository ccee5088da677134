package informer

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/internal/base/config"
)

type recording []*Change

func (r *recording) Enqueue(c *Change) { *r = append(*r, c) }

func listenerFor(ops ...string) (*Watcher, *recording) {
	out := &recording{}
	w := NewWatcher(Options{Cluster: "c", Out: out, Resource: config.Resource{Version: "v1", Resource: "configmaps", Operations: ops}})
	w.res = NewResource("c", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)
	return w, out
}

func obj(rv string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetNamespace("ns")
	u.SetName("cm")
	u.SetUID("u1")
	u.SetResourceVersion(rv)
	return u
}

func TestADeleteSeenOnlyThroughARelistIsMarkedFinalStateUnknown(t *testing.T) {
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			w, out := listenerFor()
			w.onDelete(cache.DeletedFinalStateUnknown{Key: "ns/cm", Obj: tc.obj(t, "7")})
			if len(*out) != 1 {
				t.Fatalf("got %d changes, want 1", len(*out))
			}
			c := (*out)[0]
			if c.Op != OpDeleted || !c.FinalStateUnknown || c.Key != "configmaps/ns/cm" || c.Object.GetResourceVersion() != "7" {
				t.Fatalf("got %+v", c)
			}
		})
	}
}

func TestAnUpdateWithAnUnchangedResourceVersionIsNotAChange(t *testing.T) {
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			w, out := listenerFor()
			w.onUpdate(tc.obj(t, "5"), tc.obj(t, "5"))
			w.onUpdate(tc.obj(t, "5"), tc.obj(t, "6"))
			if len(*out) != 1 || (*out)[0].Op != OpUpdated || (*out)[0].OldObject.GetResourceVersion() != "5" {
				t.Fatalf("got %+v", *out)
			}
		})
	}
}

func TestOperationsThatAreNotConfiguredAreNotEmitted(t *testing.T) {
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			w, out := listenerFor(config.OpDeleted)
			w.onAdd(tc.obj(t, "1"), false)
			w.onUpdate(tc.obj(t, "1"), tc.obj(t, "2"))
			w.onDelete(tc.obj(t, "3"))
			if len(*out) != 1 || (*out)[0].Op != OpDeleted {
				t.Fatalf("got %+v", *out)
			}
		})
	}
}

func TestStrippingManagedFieldsKeepsTheRestOfTheObject(t *testing.T) {
	u := obj("1")
	u.Object["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{"manager": "kubectl"}}
	got, err := stripManagedFields(u)
	if err != nil {
		t.Fatal(err)
	}
	m := got.(*unstructured.Unstructured)
	if m.GetManagedFields() != nil || m.GetName() != "cm" || m.GetResourceVersion() != "1" {
		t.Fatalf("got %v", m.Object)
	}
}

func TestSnapshotIDsAreUniqueAndIncreasing(t *testing.T) {
	prev := ""
	for range 1000 {
		id := newSnapshotID()
		if len(id) < len(prev) || (len(id) == len(prev) && id <= prev) {
			t.Fatalf("%q after %q", id, prev)
		}
		prev = id
	}
}
