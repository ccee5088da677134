package verify_test

import (
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/verify"
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

func TestDiffNamesMissingStaleAndExtraKeys(t *testing.T) {
	v := verify.NewView()
	v.Apply(ev(encoding.TypeAdded, "cm/ns/stale", "1", ""))
	v.Apply(ev(encoding.TypeAdded, "cm/ns/extra", "1", ""))
	d := v.Diff("cm", map[string]string{"cm/ns/stale": "2", "cm/ns/missing": "3"})
	if len(d) != 3 {
		t.Fatalf("diff %v", d)
	}
}
