package consumer_test

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
)

// ofUID gives an object event of obj another uid, with the id kubewire
// would give it.
func ofUID(uid string) func(*event.Event) {
	return func(e *event.Event) {
		e.SetExtension(encoding.ExtUID, uid)
		parts := strings.SplitN(e.ID(), "/", 2)
		e.SetID(uid + "/" + parts[1])
	}
}

// heldUIDs lists the view as "name:uid@rv", sorted by key.
func heldUIDs(v *consumer.View) []string {
	out := []string{}
	for _, o := range v.Objects("") {
		out = append(out, o.Name+":"+o.UID+"@"+o.ResourceVersion)
	}
	sort.Strings(out)
	return out
}

// interleavings calls f with every order of a's and b's steps that keeps
// each one's own order.
func interleavings(a, b []step, f func([]step)) {
	var rec func(i, j int, acc []step)
	rec = func(i, j int, acc []step) {
		if i == len(a) && j == len(b) {
			f(append([]step(nil), acc...))
			return
		}
		if i < len(a) {
			rec(i+1, j, append(acc, a[i]))
		}
		if j < len(b) {
			rec(i, j+1, append(acc, b[j]))
		}
	}
	rec(0, 0, nil)
}

// TestAfterTheTopicGrewATombstoneRemovesNoNewerObjectOfAnotherPartition is
// the smallest repro of issue 41, point 1: the key's earlier object was
// added and deleted in p0, whose tombstone trails; its new object arrives
// in p1, added partitions being where the key now hashes, with two
// snapshots listing it. Whatever the order the partitions are read in,
// the key ends holding the new object.
func TestAfterTheTopicGrewATombstoneRemovesNoNewerObjectOfAnotherPartition(t *testing.T) {
	p0 := []step{
		obj(encoding.TypeAdded, "k", "10", ofUID("u1")),
		obj(encoding.TypeDeleted, "k", "11", ofUID("u1")),
		{part: "p0", tombstone: "configmaps/ns/k"},
	}
	p1 := []step{obj(encoding.TypeAdded, "k", "20", ofUID("u2"))}
	for _, sid := range []string{"s2", "s3"} {
		p1 = append(p1, marker(encoding.TypeSnapshotStarted, sid),
			obj(encoding.TypeSynced, "k", "20", ofUID("u2"), with(encoding.ExtSnapshotID, sid)),
			marker(encoding.TypeSnapshotCompleted, sid))
	}
	for i := range p1 {
		p1[i].part = "p1"
	}
	n := 0
	interleavings(p0, p1, func(steps []step) {
		n++
		v, _ := run(steps)
		if got := heldUIDs(v); !reflect.DeepEqual(got, []string{"k:u2@20"}) {
			var order []string
			for _, s := range steps {
				what := s.tombstone
				if s.ev != nil {
					what = s.ev.ID()
				}
				order = append(order, s.part+" "+what)
			}
			t.Errorf("read in the order\n  %s\nthe view holds %v, want k:u2@20", strings.Join(order, "\n  "), got)
		}
	})
	if n != 120 {
		t.Fatalf("%d orders, want 120", n)
	}
}

// TestATombstoneAfterADeleteTheViewDidNotApplyRemovesNothing: kubewire,
// restarted from its checkpoint, sends a key's delete of its earlier
// object again, and the tombstone after it, once the new object was
// applied. Neither is newer than the object held.
func TestATombstoneAfterADeleteTheViewDidNotApplyRemovesNothing(t *testing.T) {
	v, _ := run([]step{
		obj(encoding.TypeAdded, "k", "10", ofUID("u1")),
		obj(encoding.TypeDeleted, "k", "11", ofUID("u1")),
		{part: "p0", tombstone: "configmaps/ns/k"},
		obj(encoding.TypeAdded, "k", "12", ofUID("u2")),
		// The restart's copies:
		obj(encoding.TypeDeleted, "k", "11", ofUID("u1")),
		{part: "p0", tombstone: "configmaps/ns/k"},
		obj(encoding.TypeAdded, "k", "12", ofUID("u2")),
	})
	if got := heldUIDs(v); !reflect.DeepEqual(got, []string{"k:u2@12"}) {
		t.Errorf("the view holds %v, want k:u2@12", got)
	}
}

// TestAnAdoptedPartitionKeepsTheNewerVersionOfEachKey hands a partition
// from one member to another that already knows some of its keys from
// another partition: across partitions, the newer version wins, a delete
// counting as one.
func TestAnAdoptedPartitionKeepsTheNewerVersionOfEachKey(t *testing.T) {
	// Member b read the old partition p0.
	b, _ := run([]step{
		obj(encoding.TypeAdded, "gone-here", "5"),     // deleted at 10 in p1
		obj(encoding.TypeAdded, "older-here", "6"),    // updated to 9 in p1
		obj(encoding.TypeAdded, "newer-here", "12"),   // p1 holds it at 8
		obj(encoding.TypeAdded, "deleted-here", "13"), // deleted here at 14; p1 holds it at 7
		obj(encoding.TypeDeleted, "deleted-here", "14"),
		obj(encoding.TypeAdded, "only-here", "15"),
	})
	state, err := b.StateOf("p0")
	if err != nil {
		t.Fatal(err)
	}
	// Member a reads p1, where the keys now hash.
	a, r := run([]step{
		inPart("p1", obj(encoding.TypeAdded, "gone-here", "8")),
		inPart("p1", obj(encoding.TypeDeleted, "gone-here", "10")),
		inPart("p1", obj(encoding.TypeUpdated, "older-here", "9")),
		inPart("p1", obj(encoding.TypeUpdated, "newer-here", "8")),
		inPart("p1", obj(encoding.TypeUpdated, "deleted-here", "7")),
	})
	r.calls = nil
	if err := a.Adopt("p0", state); err != nil {
		t.Fatal(err)
	}
	want := []string{"newer-here@12", "older-here@9", "only-here@15"}
	if got := held(a); !reflect.DeepEqual(got, want) {
		t.Errorf("after the hand-over the view holds %v, want %v", got, want)
	}
	if want := []string{"update newer-here 8->12", "add only-here 15", "delete-unknown deleted-here 7"}; !sameElements(r.calls, want) {
		t.Errorf("handlers saw %q, want %q in any order", r.calls, want)
	}
	// The adopted partition goes on from where b was.
	if p := a.Position(); p["p0"] != 6 {
		t.Errorf("position %v, want p0 at 6", p)
	}
}

func sameElements(a, b []string) bool {
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

// TestASyncedRecordThroughAnAddedPartitionRestoresAKeyPrunedAtItsVersion is
// issue 41, point 3: p0's window of s1 prunes k, which now hashes to p1,
// the added partition, whose window of s1, started before that prune,
// lists k at the version it was pruned at. k is live.
func TestASyncedRecordThroughAnAddedPartitionRestoresAKeyPrunedAtItsVersion(t *testing.T) {
	v, _ := run([]step{
		obj(encoding.TypeAdded, "k", "5"),
		marker(encoding.TypeSnapshotStarted, "s1"),
		inPart("p1", marker(encoding.TypeSnapshotStarted, "s1")),
		marker(encoding.TypeSnapshotCompleted, "s1"),
		inPart("p1", obj(encoding.TypeSynced, "k", "5", with(encoding.ExtSnapshotID, "s1"))),
		inPart("p1", marker(encoding.TypeSnapshotCompleted, "s1")),
	})
	if got := held(v); !reflect.DeepEqual(got, []string{"k@5"}) {
		t.Errorf("the view holds %v, want k@5", got)
	}
	if st := v.Stats(); st.Pruned != 1 || st.Restored != 1 {
		t.Errorf("stats %+v, want k pruned once and restored once", st)
	}
	// A live change at the version it was pruned at is a late copy, and
	// an older record from another partition does not restore it.
	w, _ := run([]step{
		obj(encoding.TypeAdded, "k", "5"),
		marker(encoding.TypeSnapshotStarted, "s1"),
		marker(encoding.TypeSnapshotCompleted, "s1"),
		inPart("p1", obj(encoding.TypeSynced, "k", "4", with(encoding.ExtSnapshotID, "s0"))),
		inPart("p1", obj(encoding.TypeAdded, "k", "5")),
	})
	if got := held(w); len(got) != 0 {
		t.Errorf("the view holds %v, want nothing", got)
	}
}
