package consumer_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
)

// step is one record of a partition: an event, or a tombstone of key.
type step struct {
	part      string
	ev        *event.Event
	tombstone string
}

// obj builds an object event of configmaps/ns/<name> at rv, with the id
// kubewire gives it.
func obj(typ, name, rv string, opts ...func(*event.Event)) step {
	e := event.New()
	e.SetType(typ)
	e.SetSource("/clusters/c/api/v1/configmaps")
	uid := "uid-" + name
	op := typ[strings.LastIndexByte(typ, '.')+1:]
	e.SetID(uid + "/" + rv + "/" + op)
	e.SetExtension(encoding.ExtPartitionKey, "configmaps/ns/"+name)
	e.SetExtension(encoding.ExtNamespace, "ns")
	e.SetExtension(encoding.ExtName, name)
	e.SetExtension(encoding.ExtUID, uid)
	e.SetExtension(encoding.ExtResourceVersion, rv)
	data, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
		"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv, "labels": map[string]any{"app": name},
	}})
	e.DataEncoded = data
	for _, o := range opts {
		o(&e)
	}
	return step{part: "p0", ev: &e}
}

func marker(typ, sid string, opts ...func(*event.Event)) step {
	e := event.New()
	e.SetType(typ)
	e.SetSource("/clusters/c/api/v1/configmaps")
	e.SetID(sid + "/" + typ[strings.LastIndexByte(typ, '.')+1:])
	e.SetExtension(encoding.ExtPartitionKey, "configmaps")
	e.SetExtension(encoding.ExtSnapshotID, sid)
	for _, o := range opts {
		o(&e)
	}
	return step{part: "p0", ev: &e}
}

func with(name, value string) func(*event.Event) {
	return func(e *event.Event) { e.SetExtension(name, value) }
}

func inPart(p string, s step) step { s.part = p; return s }

// recorder records handler calls as "add ns/name rv", "update ns/name
// rv->rv", "delete ns/name rv" and "delete-unknown ns/name rv".
type recorder struct{ calls []string }

func (r *recorder) OnAdd(o any, _ bool) {
	u := o.(*unstructured.Unstructured)
	r.calls = append(r.calls, "add "+u.GetName()+" "+u.GetResourceVersion())
}

func (r *recorder) OnUpdate(o, n any) {
	a, b := o.(*unstructured.Unstructured), n.(*unstructured.Unstructured)
	r.calls = append(r.calls, "update "+b.GetName()+" "+a.GetResourceVersion()+"->"+b.GetResourceVersion())
}

func (r *recorder) OnDelete(o any) {
	what := "delete"
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		what, o = "delete-unknown", d.Obj
	}
	u := o.(*unstructured.Unstructured)
	r.calls = append(r.calls, what+" "+u.GetName()+" "+u.GetResourceVersion())
}

func run(steps []step) (*consumer.View, *recorder) {
	v := consumer.NewView(consumer.Options{})
	r := &recorder{}
	v.AddEventHandler(r)
	offsets := map[string]int64{}
	for _, s := range steps {
		pos := consumer.Position{Partition: s.part, Offset: offsets[s.part]}
		offsets[s.part]++
		if s.ev == nil {
			v.Tombstone(pos, s.tombstone)
			continue
		}
		v.Apply(pos, s.ev)
	}
	return v, r
}

// held lists the view as "name@rv", sorted.
func held(v *consumer.View) []string {
	out := []string{}
	for _, o := range v.Objects("") {
		out = append(out, o.Name+"@"+o.ResourceVersion)
	}
	sort.Strings(out)
	return out
}

func TestTheViewAppliesTheConsumersRule(t *testing.T) {
	const (
		add, upd, syn, del = encoding.TypeAdded, encoding.TypeUpdated, encoding.TypeSynced, encoding.TypeDeleted
		started, completed = encoding.TypeSnapshotStarted, encoding.TypeSnapshotCompleted
	)
	for _, tc := range []struct {
		name  string
		steps []step
		held  []string
		calls []string
	}{{
		name:  "a stale lower-resourceVersion update after a newer one is ignored",
		steps: []step{obj(add, "a", "5"), obj(upd, "a", "9"), obj(upd, "a", "7"), obj(syn, "a", "8")},
		held:  []string{"a@9"},
		calls: []string{"add a 5", "update a 5->9"},
	}, {
		name:  "a duplicate id is applied once",
		steps: []step{obj(add, "a", "5"), obj(upd, "a", "6"), obj(upd, "a", "6"), obj(upd, "a", "7")},
		held:  []string{"a@7"},
		calls: []string{"add a 5", "update a 5->6", "update a 6->7"},
	}, {
		name:  "a duplicate delete is applied once and a late copy of the object does not bring it back",
		steps: []step{obj(add, "a", "5"), obj(del, "a", "6"), obj(del, "a", "6"), obj(upd, "a", "5")},
		held:  []string{},
		calls: []string{"add a 5", "delete a 6"},
	}, {
		name:  "an object created again under the same key after its delete is added",
		steps: []step{obj(add, "a", "5"), obj(del, "a", "6"), obj(add, "a", "7", with(encoding.ExtUID, "uid-a2"))},
		held:  []string{"a@7"},
		calls: []string{"add a 5", "delete a 6", "add a 7"},
	}, {
		name: "a complete snapshot prunes a key with no event since its started marker",
		steps: []step{
			obj(add, "gone", "1"), obj(add, "kept", "2"),
			marker(started, "s1"), obj(syn, "kept", "2"), marker(completed, "s1"),
		},
		held:  []string{"kept@2"},
		calls: []string{"add gone 1", "add kept 2", "delete-unknown gone 1"},
	}, {
		name: "an incomplete snapshot prunes nothing",
		steps: []step{
			obj(add, "live", "1"), obj(add, "kept", "2"),
			marker(started, "s1"), obj(syn, "kept", "2"), marker(completed, "s1", with(encoding.ExtIncomplete, "1")),
		},
		held:  []string{"kept@2", "live@1"},
		calls: []string{"add live 1", "add kept 2"},
	}, {
		name: "after an incomplete snapshot the next complete one prunes",
		steps: []step{
			obj(add, "live", "1"), obj(add, "kept", "2"),
			marker(started, "s1"), marker(completed, "s1", with(encoding.ExtIncomplete, "1")),
			marker(started, "s2"), obj(syn, "kept", "2"), marker(completed, "s2"),
		},
		held:  []string{"kept@2"},
		calls: []string{"add live 1", "add kept 2", "delete-unknown live 1"},
	}, {
		name: "any value of incomplete keeps the snapshot from pruning",
		steps: []step{
			obj(add, "live", "1"),
			marker(started, "s1"), marker(completed, "s1", with(encoding.ExtIncomplete, "0")),
			marker(started, "s2"), marker(completed, "s2", with(encoding.ExtIncomplete, "some")),
		},
		held:  []string{"live@1"},
		calls: []string{"add live 1"},
	}, {
		name: "a key created or changed during the snapshot survives though the snapshot did not list it",
		steps: []step{
			obj(add, "changed", "1"),
			marker(started, "s1"), obj(add, "new", "5"), obj(upd, "changed", "6"), marker(completed, "s1"),
		},
		held:  []string{"changed@6", "new@5"},
		calls: []string{"add changed 1", "add new 5", "update changed 1->6"},
	}, {
		name: "a snapshot prunes only in its own partition",
		steps: []step{
			inPart("p1", obj(add, "elsewhere", "1")),
			marker(started, "s1"), marker(completed, "s1"),
		},
		held:  []string{"elsewhere@1"},
		calls: []string{"add elsewhere 1"},
	}, {
		name: "a snapshot prunes only its own resource",
		steps: []step{
			obj(add, "cm", "1"),
			marker(started, "s1", with(encoding.ExtPartitionKey, "secrets")),
			marker(completed, "s1", with(encoding.ExtPartitionKey, "secrets")),
		},
		held:  []string{"cm@1"},
		calls: []string{"add cm 1"},
	}, {
		name:  "a completed marker whose started marker was never seen prunes nothing",
		steps: []step{obj(add, "a", "1"), marker(completed, "s0")},
		held:  []string{"a@1"},
		calls: []string{"add a 1"},
	}, {
		name:  "a tombstone deletes its key",
		steps: []step{obj(add, "a", "1"), obj(add, "b", "2"), {part: "p0", tombstone: "configmaps/ns/a"}},
		held:  []string{"b@2"},
		calls: []string{"add a 1", "add b 2", "delete-unknown a 1"},
	}, {
		name:  "a tombstone right after its delete changes nothing more",
		steps: []step{obj(add, "a", "1"), obj(del, "a", "2"), {part: "p0", tombstone: "configmaps/ns/a"}},
		held:  []string{},
		calls: []string{"add a 1", "delete a 2"},
	}, {
		name:  "a finalstateunknown delete removes the object and says its final state is unknown",
		steps: []step{obj(add, "a", "4"), obj(del, "a", "4", with(encoding.ExtFinalStateUnknown, "true"))},
		held:  []string{},
		calls: []string{"add a 4", "delete-unknown a 4"},
	}, {
		name:  "a late delete of an earlier object under the key leaves the newer object",
		steps: []step{obj(add, "a", "9", with(encoding.ExtUID, "uid-new")), obj(del, "a", "4")},
		held:  []string{"a@9"},
		calls: []string{"add a 9"},
	}, {
		name:  "a conflated event is applied as the newest state",
		steps: []step{obj(add, "a", "1"), obj(upd, "a", "9", with(encoding.ExtConflated, "7"))},
		held:  []string{"a@9"},
		calls: []string{"add a 1", "update a 1->9"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := run(tc.steps)
			if got := held(v); !reflect.DeepEqual(got, tc.held) {
				t.Errorf("the view holds %v, want %v", got, tc.held)
			}
			if !reflect.DeepEqual(r.calls, tc.calls) {
				t.Errorf("handlers saw %q, want %q", r.calls, tc.calls)
			}
		})
	}
}

func TestTheViewCountsWhatItDroppedAndReportsStaleEvents(t *testing.T) {
	var problems []consumer.Problem
	v := consumer.NewView(consumer.Options{OnProblem: func(p consumer.Problem) { problems = append(problems, p) }})
	for i, s := range []step{
		obj(encoding.TypeAdded, "a", "5"), obj(encoding.TypeAdded, "a", "5"), obj(encoding.TypeUpdated, "a", "3"),
		obj(encoding.TypeUpdated, "a", "6", with(encoding.ExtConflated, "2")),
	} {
		v.Apply(consumer.Position{Partition: "p0", Offset: int64(i)}, s.ev)
	}
	st := v.Stats()
	if st.Duplicates != 1 || st.Stale != 1 || st.Conflated != 1 || st.Applied != 2 {
		t.Errorf("stats %+v: want 1 duplicate, 1 stale, 1 conflated, 2 applied", st)
	}
	if len(problems) != 1 || problems[0].Reason != consumer.ProblemStale || problems[0].Position.Offset != 2 {
		t.Errorf("problems %+v: want the stale update at offset 2", problems)
	}
	if p := v.Position(); p["p0"] != 4 {
		t.Errorf("position %v, want p0 at 4", p)
	}
}

func TestTheViewFindsObjectsByKeyNamespaceAndLabel(t *testing.T) {
	v, _ := run([]step{
		obj(encoding.TypeAdded, "a", "1"), obj(encoding.TypeAdded, "b", "2"),
		obj(encoding.TypeAdded, "c", "3", with(encoding.ExtNamespace, "other")),
	})
	u, ok, err := v.Get("configmaps/ns/b")
	if err != nil || !ok || u.GetResourceVersion() != "2" {
		t.Fatalf("Get: %v %v %v", u, ok, err)
	}
	names := func(us []*unstructured.Unstructured, err error) string {
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, u := range us {
			s = append(s, u.GetName())
		}
		return fmt.Sprint(s)
	}
	if got := names(v.ByNamespace("ns")); got != "[a b]" {
		t.Errorf("ByNamespace(ns) = %s, want [a b]", got)
	}
	sel, _ := labels.Parse("app in (a,c)")
	if got := names(v.ByLabel(sel)); got != "[a c]" {
		t.Errorf("ByLabel = %s, want [a c]", got)
	}
	if got := names(v.List()); got != "[a b c]" {
		t.Errorf("List = %s, want [a b c]", got)
	}
}

func TestTheViewKeepsTheObjectOfEveryPayloadMode(t *testing.T) {
	full := obj(encoding.TypeAdded, "full", "1")
	diff := obj(encoding.TypeUpdated, "diff", "2")
	diff.ev.DataEncoded = []byte(`{"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"diff","namespace":"ns","resourceVersion":"2"}},"patch":[]}`)
	ref := obj(encoding.TypeUpdated, "ref", "3", with(encoding.ExtPayload, encoding.PayloadReference))
	ref.ev.DataEncoded = []byte(`{"apiVersion":"v1","kind":"ConfigMap","namespace":"ns","name":"ref","uid":"uid-ref","resourceVersion":"3"}`)
	v, _ := run([]step{full, diff, ref})
	for _, k := range []string{"full", "diff", "ref"} {
		o, ok := v.Lookup("configmaps/ns/" + k)
		if !ok {
			t.Fatalf("%s missing", k)
		}
		u, err := o.Decode()
		if err != nil || u.GetName() != k || u.GetKind() != "ConfigMap" {
			t.Errorf("%s decodes to %v (%v)", k, u, err)
		}
		if o.Reference != (k == "ref") {
			t.Errorf("%s: Reference = %v", k, o.Reference)
		}
	}
}

func TestTheNamespaceIndexFollowsUpdatesAndDeletes(t *testing.T) {
	v, _ := run([]step{
		obj(encoding.TypeAdded, "a", "1"), obj(encoding.TypeAdded, "b", "2"),
		obj(encoding.TypeUpdated, "a", "3"), obj(encoding.TypeDeleted, "b", "4"),
	})
	us, err := v.ByNamespace("ns")
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].GetName() != "a" || us[0].GetResourceVersion() != "3" {
		t.Fatalf("ByNamespace(ns) after an update of a and a delete of b holds %d objects %v, want a at 3", len(us), us)
	}
	if us, _ := v.ByNamespace("none"); len(us) != 0 {
		t.Errorf("ByNamespace of an empty namespace = %v", us)
	}
}

func TestResourceRemovedDeletesEveryKeyOfItsResourceInItsPartition(t *testing.T) {
	removed := func(part string) step {
		s := marker(encoding.TypeRemoved, "x")
		s.ev.SetID("configmaps/removed/crd-uid")
		return inPart(part, s)
	}
	v, r := run([]step{
		obj(encoding.TypeAdded, "a", "5"), obj(encoding.TypeAdded, "b", "6"), obj(encoding.TypeDeleted, "b", "7"),
		inPart("p1", obj(encoding.TypeAdded, "c", "8")),
		removed("p0"),
	})
	if got := held(v); !slices.Equal(got, []string{"c@8"}) {
		t.Errorf("held %v; want only the object of the other partition", got)
	}
	if want := []string{"add a 5", "add b 6", "delete b 7", "add c 8", "delete-unknown a 5"}; !slices.Equal(r.calls, want) {
		t.Errorf("calls %v, want %v", r.calls, want)
	}
	if p := v.Stats().Problems; p != 0 {
		t.Errorf("%d problems; resource.removed is part of the contract", p)
	}
}
