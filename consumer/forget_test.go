package consumer_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

// inNamespace moves an object event of obj to namespace ns.
func inNamespace(ns string) func(*event.Event) {
	return func(e *event.Event) {
		e.SetExtension(encoding.ExtNamespace, ns)
		e.SetExtension(encoding.ExtPartitionKey, "configmaps/"+ns+"/"+e.Extensions()[encoding.ExtName].(string))
	}
}

// TestAfterAGapTheViewTakesTheSnapshotAndTheChangesThatFollowWhateverItHeld
// plays an etcd restore under each kind of gap: the objects come back at
// versions older than those the View held. The View must take the
// snapshot after the gap and the changes after it, prune what the
// snapshot does not list, and still skip copies of events from before the
// gap: a retry's copy by its id, a redelivery by the broker by its
// position.
func TestAfterAGapTheViewTakesTheSnapshotAndTheChangesThatFollowWhateverItHeld(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gap   informer.Gap
		after string // the version of a's change after the snapshot
	}{
		{name: "A plain restore: versions went backwards.",
			gap:   informer.Gap{From: "1003", To: "860", Reason: informer.GapTooLarge, Backwards: true},
			after: "870"},
		{name: "A restore with bumped revisions reads as an expired gap.",
			gap:   informer.Gap{From: "1003", To: "5000", Reason: informer.GapExpired},
			after: "5001"},
		{name: "A config change forgets too.",
			gap:   informer.Gap{From: "1003", To: "5000", Reason: informer.GapConfigChanged},
			after: "5001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gap := step{part: "p0", ev: gapEvent(t, tc.gap)}
			steps := []step{
				obj(encoding.TypeAdded, "a", "999"), obj(encoding.TypeUpdated, "a", "1000"),
				obj(encoding.TypeAdded, "b", "1001"),
				obj(encoding.TypeAdded, "c", "1002"), obj(encoding.TypeDeleted, "c", "1003"),
				gap, gap,
				// A copy of a's last event before the gap: skipped by its id.
				obj(encoding.TypeUpdated, "a", "1000"),
				// The snapshot of the restored cluster: a and c at the
				// versions of the backup, b not there.
				marker(encoding.TypeSnapshotStarted, "s1"),
				obj(encoding.TypeSynced, "a", "850", with(encoding.ExtSnapshotID, "s1")),
				obj(encoding.TypeSynced, "c", "840", with(encoding.ExtSnapshotID, "s1")),
				marker(encoding.TypeSnapshotCompleted, "s1"),
			}
			var problems []consumer.Problem
			v := consumer.NewView(consumer.Options{OnProblem: func(p consumer.Problem) {
				if p.Reason != consumer.ProblemStale {
					problems = append(problems, p)
				}
			}})
			r := &recorder{}
			v.AddEventHandler(r)
			for i, s := range steps {
				v.Apply(consumer.Position{Partition: "p0", Offset: int64(i)}, s.ev)
			}
			// The broker delivers again from b's add (a consumer group
			// rebalanced, say): the records keep their offsets.
			for i := 2; i < len(steps); i++ {
				v.Apply(consumer.Position{Partition: "p0", Offset: int64(i)}, steps[i].ev)
			}
			v.Apply(consumer.Position{Partition: "p0", Offset: int64(len(steps))}, obj(encoding.TypeUpdated, "a", tc.after).ev)
			if got, want := held(v), []string{"a@" + tc.after, "c@840"}; !reflect.DeepEqual(got, want) {
				t.Errorf("the view holds %v, want %v", got, want)
			}
			want := []string{"add a 999", "update a 999->1000", "add b 1001", "add c 1002", "delete c 1003",
				"update a 1000->850", "add c 840", "delete-unknown b 1001", "update a 850->" + tc.after}
			if !reflect.DeepEqual(r.calls, want) {
				t.Errorf("handlers saw %q,\nwant %q", r.calls, want)
			}
			if st := v.Stats(); st.Duplicates != 1 || st.Reread != int64(len(steps)-2) || st.Pruned != 1 {
				t.Errorf("stats %+v: want the copy before the snapshot a duplicate, %d records read again, b pruned", st, len(steps)-2)
			}
			if len(problems) != 0 {
				t.Errorf("problems: %+v", problems)
			}
		})
	}
}

// TestARelistAfterAnExpiredWatchIsTakenAtVersionsNotAboveTheGap is what
// test/faults' TestARelistAfterCompactionEmitsTheLostDeletesMarkedAndConverges
// sees, without the API server: after an expired gap kubewire's relist
// sends the deletes it lost, marked finalstateunknown, at the version it
// last knew, and updates found by the list, all at versions not above
// the gap's to. They are the new history, not copies of the old one.
func TestARelistAfterAnExpiredWatchIsTakenAtVersionsNotAboveTheGap(t *testing.T) {
	v, _ := run([]step{
		obj(encoding.TypeAdded, "a", "10"), obj(encoding.TypeAdded, "b", "11"),
		{part: "p0", ev: gapEvent(t, informer.Gap{From: "11", To: "40", Reason: informer.GapExpired})},
		obj(encoding.TypeDeleted, "b", "11", with(encoding.ExtFinalStateUnknown, "true")),
		obj(encoding.TypeUpdated, "a", "30"),
		obj(encoding.TypeAdded, "c", "35"),
		marker(encoding.TypeSnapshotStarted, "s1"),
		obj(encoding.TypeSynced, "a", "30", with(encoding.ExtSnapshotID, "s1")),
		obj(encoding.TypeSynced, "c", "35", with(encoding.ExtSnapshotID, "s1")),
		marker(encoding.TypeSnapshotCompleted, "s1"),
		obj(encoding.TypeUpdated, "a", "41"),
	})
	if got, want := held(v), []string{"a@41", "c@35"}; !reflect.DeepEqual(got, want) {
		t.Errorf("the view holds %v, want %v", got, want)
	}
}

// TestAGapForgetsOnlyInItsScope: a gap of one namespace's watch leaves the
// versions of other namespaces, and a gap read in one partition those of
// the keys another partition carries, until that partition's copy of the
// gap comes.
func TestAGapForgetsOnlyInItsScope(t *testing.T) {
	gap := gapEvent(t, informer.Gap{Namespace: "ns", From: "1002", To: "5000", Reason: informer.GapExpired})
	steps := []step{
		obj(encoding.TypeAdded, "a", "1000"),
		obj(encoding.TypeAdded, "x", "1001", inNamespace("other")),
		inPart("p1", obj(encoding.TypeAdded, "y", "1002")),
		{part: "p0", ev: gap},
		marker(encoding.TypeSnapshotStarted, "s1"),
		obj(encoding.TypeSynced, "a", "850", with(encoding.ExtSnapshotID, "s1")),
		// Another namespace: its versions are remembered.
		obj(encoding.TypeSynced, "x", "800", with(encoding.ExtSnapshotID, "s1"), inNamespace("other")),
		marker(encoding.TypeSnapshotCompleted, "s1"),
		// p1 has not read its copy of the gap yet.
		inPart("p1", marker(encoding.TypeSnapshotStarted, "s2")),
		inPart("p1", obj(encoding.TypeSynced, "y", "700", with(encoding.ExtSnapshotID, "s2"))),
		inPart("p1", marker(encoding.TypeSnapshotCompleted, "s2")),
	}
	v, _ := run(steps)
	if got, want := held(v), []string{"a@850", "x@1001", "y@1002"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("before p1's copy of the gap the view holds %v, want %v", got, want)
	}
	offset := int64(4) // p1's next offset
	for _, s := range []step{
		{part: "p1", ev: gap},
		inPart("p1", marker(encoding.TypeSnapshotStarted, "s3")),
		inPart("p1", obj(encoding.TypeSynced, "y", "700", with(encoding.ExtSnapshotID, "s3"))),
		inPart("p1", marker(encoding.TypeSnapshotCompleted, "s3")),
	} {
		v.Apply(consumer.Position{Partition: "p1", Offset: offset}, s.ev)
		offset++
	}
	if got, want := held(v), []string{"a@850", "x@1001", "y@700"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after p1's copy of the gap the view holds %v, want %v", got, want)
	}
}

// TestWhatAGapForgotSurvivesASavedState: a View restarted from a state
// saved between the gap and the snapshot takes the snapshot all the same.
func TestWhatAGapForgotSurvivesASavedState(t *testing.T) {
	v, _ := run([]step{
		obj(encoding.TypeAdded, "a", "1000"),
		obj(encoding.TypeAdded, "c", "1001"), obj(encoding.TypeDeleted, "c", "1002"),
		{part: "p0", ev: gapEvent(t, informer.Gap{From: "1002", To: "860", Reason: informer.GapTooLarge, Backwards: true})},
	})
	var b bytes.Buffer
	if err := v.SaveState(&b); err != nil {
		t.Fatal(err)
	}
	w := consumer.NewView(consumer.Options{})
	if err := w.LoadState(&b); err != nil {
		t.Fatal(err)
	}
	for i, s := range []step{
		obj(encoding.TypeUpdated, "a", "1000"), // a copy from before the gap
		marker(encoding.TypeSnapshotStarted, "s1"),
		obj(encoding.TypeSynced, "a", "850", with(encoding.ExtSnapshotID, "s1")),
		obj(encoding.TypeSynced, "c", "840", with(encoding.ExtSnapshotID, "s1")),
		marker(encoding.TypeSnapshotCompleted, "s1"),
	} {
		w.Apply(consumer.Position{Partition: "p0", Offset: int64(4 + i)}, s.ev)
	}
	if got, want := held(w), []string{"a@850", "c@840"}; !reflect.DeepEqual(got, want) {
		t.Errorf("the restarted view holds %v, want %v", got, want)
	}
}
