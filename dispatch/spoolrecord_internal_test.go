package dispatch

import (
	"encoding/binary"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

var recordResource = informer.NewResource("test", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)

// roundTrip spools e as the spooler writes it and reads it back as the
// feed does.
func roundTrip(t *testing.T, e *entry) (*spoolRecord, *Item) {
	t.Helper()
	ev, err := e.item.Event()
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseSpoolRecord(appendSpoolRecord(nil, e, ev))
	if err != nil {
		t.Fatal(err)
	}
	return r, r.item(func(prefix string) *informer.Resource { return &informer.Resource{KeyPrefix: prefix} })
}

func TestAGapReadBackFromTheSpoolIsTheSameMarkerWithItsRange(t *testing.T) {
	gap := &informer.Gap{Namespace: "team-a", From: "100", To: "250", Reason: informer.GapExpired}
	it := NewItem(&informer.Change{Op: informer.OpGap, Resource: recordResource, Key: recordResource.KeyPrefix, Gap: gap,
		Observed: time.Unix(0, 12345)})
	want, _ := it.Event()
	r, back := roundTrip(t, &entry{item: it, key: it.Change.Key})
	c := back.Change
	if !r.marker || !c.IsMarker() || c.Op != informer.OpGap || c.Key != "configmaps" || c.Resource.KeyPrefix != "configmaps" ||
		!c.Observed.Equal(it.Change.Observed) || c.SnapshotID != "" {
		t.Errorf("read back as marker %v, %+v", r.marker, c)
	}
	if c.Gap == nil || *c.Gap != *gap {
		t.Errorf("gap read back as %+v, want %+v", c.Gap, gap)
	}
	got, err := back.Event()
	if err != nil || string(got.AppendJSON(nil)) != string(want.AppendJSON(nil)) {
		t.Fatalf("event read back as %s (%v), want %s", got.AppendJSON(nil), err, want.AppendJSON(nil))
	}
	if got.Type() != encoding.TypeGap || got.ID() != "configmaps/team-a/gap/100-250" {
		t.Errorf("type %s id %s", got.Type(), got.ID())
	}
}

func TestAConflatedRecordKeepsTheFirstFoldedVersion(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace("ns")
	u.SetName("a")
	u.SetUID("uid-a")
	u.SetResourceVersion("17")
	it := NewItem(&informer.Change{Op: informer.OpUpdated, Resource: recordResource, Key: recordResource.ObjectKey("ns", "a"),
		Object: informer.FromUnstructured(u), Observed: time.Unix(1, 0)})
	r, back := roundTrip(t, &entry{item: it, key: it.Change.Key, size: 10, conflated: 3, conflatedFrom: "14"})
	if r.conflated != 3 || back.conflated != 3 || back.conflatedFrom != "14" {
		t.Errorf("read back conflated %d from %q, want 3 from 14", back.conflated, back.conflatedFrom)
	}
	// The item read back has no object: its version comes from its event,
	// for a fold of it into a newer change.
	if rv := back.resourceVersion(); rv != "17" {
		t.Errorf("the version of an item read back is %q, want 17", rv)
	}
}

// A spool an older kubewire left holds records without the first folded
// version (no flagConflatedFrom): they still read back, with their count.
func TestARecordOfAnOlderKubewireReadsBackWithoutItsFirstFoldedVersion(t *testing.T) {
	it := NewItem(&informer.Change{Op: informer.OpSnapshotStarted, Resource: recordResource, Key: recordResource.KeyPrefix,
		SnapshotID: "s1", Observed: time.Unix(1, 0)})
	ev, _ := it.Event()
	b := []byte{1, flagMarker}
	b = binary.AppendUvarint(b, 2)
	b = binary.AppendUvarint(b, 0)
	b = binary.AppendVarint(b, time.Unix(1, 0).UnixNano())
	for _, s := range []string{"configmaps", "started", "configmaps", "s1"} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = ev.AppendJSON(b)
	r, err := parseSpoolRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if !r.marker || r.conflated != 2 || r.conflatedFrom != "" || r.key != "configmaps" || r.op != "started" || r.snapshot != "s1" ||
		r.event.ID() != "s1/started" {
		t.Errorf("read back %+v", r)
	}
}
