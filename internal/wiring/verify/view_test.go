package verify_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/wiring/verify"
)

func ev(typ, key, rv, sid string) *event.Event {
	e := event.New()
	e.SetType(typ)
	e.SetExtension(encoding.ExtPartitionKey, key)
	if rv != "" {
		e.SetExtension(encoding.ExtResourceVersion, rv)
		e.SetExtension(encoding.ExtUID, "u-"+key)
	}
	if sid != "" {
		e.SetExtension(encoding.ExtSnapshotID, sid)
	}
	return &e
}

func TestASnapshotRemovesKeysWithNoEventSinceItStartedAndKeepsTheRest(t *testing.T) {
	v := verify.NewView()
	for _, e := range []*event.Event{
		ev(encoding.TypeAdded, "cm/ns/gone", "1", ""),
		ev(encoding.TypeAdded, "cm/ns/kept", "2", ""),
		ev(encoding.TypeAdded, "other/ns/untouched", "3", ""),
		ev(encoding.TypeSnapshotStarted, "cm", "", "s1"),
		ev(encoding.TypeSynced, "cm/ns/kept", "2", "s1"),
		// Created while the snapshot ran: not listed, but must survive.
		ev(encoding.TypeAdded, "cm/ns/new", "5", ""),
		ev(encoding.TypeSnapshotCompleted, "cm", "", "s1"),
	} {
		v.Apply(e)
	}
	if d := v.Diff("cm", map[string]string{"cm/ns/kept": "2", "cm/ns/new": "5"}); len(d) != 0 {
		t.Fatalf("view differs from the truth: %v", d)
	}
	if d := v.Diff("other", map[string]string{"other/ns/untouched": "3"}); len(d) != 0 {
		t.Fatalf("a snapshot of one resource touched another: %v", d)
	}
	if len(v.Problems) != 0 {
		t.Fatal(v.Problems)
	}
}

func TestAVersionGoingBackwardsIsReported(t *testing.T) {
	v := verify.NewView()
	v.Apply(ev(encoding.TypeUpdated, "cm/ns/a", "9", ""))
	v.Apply(ev(encoding.TypeSynced, "cm/ns/a", "8", ""))
	if len(v.Problems) != 1 {
		t.Fatalf("problems: %v", v.Problems)
	}
}

func TestASuffixReplayedAfterAResumeIsNotAnOrderViolationButANewOlderEventIs(t *testing.T) {
	withID := func(e *event.Event, id string) *event.Event { e.SetID(id); return e }
	v := verify.NewView()
	v.Apply(withID(ev(encoding.TypeUpdated, "cm/ns/a", "8", ""), "a/8"))
	v.Apply(withID(ev(encoding.TypeUpdated, "cm/ns/a", "9", ""), "a/9"))
	// kubewire restarted from a checkpoint before 8: the suffix comes again.
	v.Apply(withID(ev(encoding.TypeUpdated, "cm/ns/a", "8", ""), "a/8"))
	v.Apply(withID(ev(encoding.TypeUpdated, "cm/ns/a", "9", ""), "a/9"))
	if len(v.Problems) != 0 || v.Replays != 1 {
		t.Fatalf("problems %v, replays %d; want none and 1", v.Problems, v.Replays)
	}
	v.Apply(withID(ev(encoding.TypeUpdated, "cm/ns/a", "7", ""), "a/7"))
	if len(v.Problems) != 1 {
		t.Fatalf("an older event never seen before is an order violation; problems: %v", v.Problems)
	}
}

func TestDiffNamesMissingStaleAndExtraKeys(t *testing.T) {
	v := verify.NewView()
	v.Apply(ev(encoding.TypeAdded, "cm/ns/stale", "1", ""))
	v.Apply(ev(encoding.TypeAdded, "cm/ns/extra", "1", ""))
	d := v.Diff("cm", map[string]string{"cm/ns/stale": "2", "cm/ns/missing": "3"})
	if len(d) != 3 {
		t.Fatalf("diff %v", d)
	}
}

func TestACompletedMarkerThatSaysTheSnapshotIsIncompleteRemovesNothing(t *testing.T) {
	v := verify.NewView()
	done := ev(encoding.TypeSnapshotCompleted, "cm", "", "s1")
	done.SetExtension(encoding.ExtIncomplete, "1")
	for _, e := range []*event.Event{
		ev(encoding.TypeAdded, "cm/ns/live-but-undelivered", "1", ""),
		ev(encoding.TypeAdded, "cm/ns/kept", "2", ""),
		ev(encoding.TypeSnapshotStarted, "cm", "", "s1"),
		ev(encoding.TypeSynced, "cm/ns/kept", "2", "s1"),
		// The record of live-but-undelivered could not be delivered, and
		// the marker says so: pruning now would delete a live object.
		done,
	} {
		v.Apply(e)
	}
	if d := v.Diff("cm", map[string]string{"cm/ns/live-but-undelivered": "1", "cm/ns/kept": "2"}); len(d) != 0 {
		t.Fatalf("an incomplete snapshot pruned the view: %v", d)
	}
	if v.Incomplete != 1 {
		t.Errorf("Incomplete = %d, want 1", v.Incomplete)
	}

	// The next complete snapshot prunes as usual, and the window of the
	// incomplete one is closed: it does not linger in the view.
	for _, e := range []*event.Event{
		ev(encoding.TypeSnapshotStarted, "cm", "", "s2"),
		ev(encoding.TypeSynced, "cm/ns/kept", "2", "s2"),
		ev(encoding.TypeSnapshotCompleted, "cm", "", "s2"),
	} {
		v.Apply(e)
	}
	if d := v.Diff("cm", map[string]string{"cm/ns/kept": "2"}); len(d) != 0 {
		t.Fatalf("a complete snapshot after an incomplete one did not prune: %v", d)
	}
}

func TestAnyValueOfIncompleteKeepsTheSnapshotFromPruning(t *testing.T) {
	// Consumers check whether the extension is there, not what it says: a
	// value that does not parse, or says 0, must not cost a live object.
	for _, value := range []string{"0", "some"} {
		v := verify.NewView()
		done := ev(encoding.TypeSnapshotCompleted, "cm", "", "s1")
		done.SetExtension(encoding.ExtIncomplete, value)
		for _, e := range []*event.Event{
			ev(encoding.TypeAdded, "cm/ns/live", "1", ""),
			ev(encoding.TypeSnapshotStarted, "cm", "", "s1"),
			done,
		} {
			v.Apply(e)
		}
		if d := v.Diff("cm", map[string]string{"cm/ns/live": "1"}); len(d) != 0 {
			t.Errorf("incomplete=%q: the snapshot pruned: %v", value, d)
		}
	}
}

func gapEv(id, ns, from, to string) *event.Event {
	e := event.New()
	e.SetType(encoding.TypeGap)
	e.SetID(id)
	e.SetSource("/clusters/c/api/v1/cm")
	e.SetExtension(encoding.ExtPartitionKey, "cm")
	data := `{"group":"","version":"v1","resource":"cm","from":"` + from + `","to":"` + to + `","reason":"expired"`
	if ns != "" {
		data += `,"namespace":"` + ns + `"`
	}
	e.DataEncoded = []byte(data + "}")
	return &e
}

func TestGapsInEveryPartitionAreListedOnceAndAreNotObjectEvents(t *testing.T) {
	p0, p1 := verify.NewView(), verify.NewView()
	for _, v := range []*verify.View{p0, p1} {
		v.Apply(gapEv("cm/team-b/gap/7-9", "team-b", "7", "9"))
		v.Apply(gapEv("cm/gap/10-20", "", "10", "20"))
	}
	p0.Apply(ev(encoding.TypeAdded, "cm/ns/a", "21", ""))
	p0.Apply(gapEv("cm/gap/10-20", "", "10", "20")) // a repeat after a restart
	v := verify.Merge(p0, p1)
	want := []verify.Gap{
		{ID: "cm/gap/10-20", Resource: "cm", From: "10", To: "20", Reason: "expired"},
		{ID: "cm/team-b/gap/7-9", Resource: "cm", Namespace: "team-b", From: "7", To: "9", Reason: "expired"},
	}
	if !reflect.DeepEqual(v.Gaps, want) {
		t.Errorf("gaps %+v, want %+v", v.Gaps, want)
	}
	if v.Events != 1 || len(v.Problems) != 0 {
		t.Errorf("events %d, problems %v; want the one object event and no problem", v.Events, v.Problems)
	}
	rep := &verify.Report{Sink: "k", Gaps: v.Gaps}
	var out strings.Builder
	rep.Print(&out)
	for _, line := range []string{
		"gap: cm: changes with resourceVersion in (10, 20] may be missing (expired)\n",
		"gap: cm in namespace team-b: changes with resourceVersion in (7, 9] may be missing (expired)\n",
		"gaps: 2\n",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
	if rep.Diverged() {
		t.Error("a report with gaps only says the view diverged")
	}
}
