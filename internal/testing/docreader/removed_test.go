package docreader

import (
	"reflect"
	"testing"
)

// No vector carries a resource.removed; this checks the step as
// docs/events.md words it: every held entry of the resource in that
// partition goes, the resource's open windows there are dropped, and
// other resources and partitions are left alone.
func TestResourceRemovedDeletesEveryKeyOfItsResourceInItsPartition(t *testing.T) {
	r := New()
	for i, rec := range []Record{
		{Partition: "p0", Event: []byte(`{"specversion":"1.0","id":"w1/5/added","source":"/s","type":"io.kubewire.object.added","partitionkey":"widgets.example.com/ns/a","uid":"w1","resourceversion":"5","namespace":"ns"}`)},
		{Partition: "p1", Event: []byte(`{"specversion":"1.0","id":"w2/6/added","source":"/s","type":"io.kubewire.object.added","partitionkey":"widgets.example.com/ns/b","uid":"w2","resourceversion":"6","namespace":"ns"}`)},
		{Partition: "p0", Event: []byte(`{"specversion":"1.0","id":"c1/7/added","source":"/s","type":"io.kubewire.object.added","partitionkey":"configmaps/ns/c","uid":"c1","resourceversion":"7","namespace":"ns"}`)},
		{Partition: "p0", Event: []byte(`{"specversion":"1.0","id":"s1/started","source":"/s","type":"io.kubewire.snapshot.started","partitionkey":"widgets.example.com","snapshotid":"s1"}`)},
		{Partition: "p0", Event: []byte(`{"specversion":"1.0","id":"widgets.example.com/removed/crd1","source":"/s","type":"io.kubewire.resource.removed","partitionkey":"widgets.example.com","data":{"group":"example.com","version":"v1","resource":"widgets","uid":"crd1"}}`)},
	} {
		rec.Offset = uint64(i)
		r.Read(rec)
	}
	want := []Object{
		{Key: "configmaps/ns/c", UID: "c1", ResourceVersion: "7"},
		{Key: "widgets.example.com/ns/b", UID: "w2", ResourceVersion: "6"},
	}
	if got := r.State(); !reflect.DeepEqual(got, want) {
		t.Errorf("state\n got  %+v\n want %+v", got, want)
	}
	if len(r.open) != 0 {
		t.Errorf("open windows %v, want none", r.open)
	}
	if p := r.Problems(); len(p) != 0 {
		t.Errorf("reported %v", p)
	}
}
