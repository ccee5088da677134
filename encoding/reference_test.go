package encoding_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

func TestAReferenceEventNamesTheObjectAndIsMarked(t *testing.T) {
	ev, err := encoding.New(sinktest.Change(informer.OpUpdated, "team-a", "big", 9))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := encoding.ReferenceEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if ref.ID() != ev.ID() || ref.Extensions()[encoding.ExtPayload] != encoding.PayloadReference {
		t.Errorf("reference event id %q ext %v; want id %q and payload=reference", ref.ID(), ref.Extensions()[encoding.ExtPayload], ev.ID())
	}
	// Exactly the shape of the reference payload mode (docs/events.md).
	var data map[string]any
	if err := json.Unmarshal(ref.Data(), &data); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"apiVersion": "demo.kubewire.io/v1", "kind": "Widget", "namespace": "team-a",
		"name": "big", "uid": "uid-team-a-big", "resourceVersion": "9"}
	if !reflect.DeepEqual(data, want) {
		t.Errorf("reference data = %s, want %v", ref.Data(), want)
	}
	for name, v := range ev.Extensions() {
		if !reflect.DeepEqual(ref.Extensions()[name], v) {
			t.Errorf("extension %s = %v, want the full event's %v", name, ref.Extensions()[name], v)
		}
	}
	if ref.Type() != ev.Type() || ref.Source() != ev.Source() || ref.Subject() != ev.Subject() || !ref.Time().Equal(ev.Time()) {
		t.Errorf("reference event %v differs from the full event %v in its attributes", ref, ev)
	}
	if _, ok := ev.Extensions()[encoding.ExtPayload]; ok {
		t.Error("ReferenceEvent modified the original event")
	}
}

func TestAClusterScopedObjectsReferenceHasNoNamespace(t *testing.T) {
	ev, err := encoding.New(sinktest.ClusterChange(informer.OpUpdated, "node-1", 4))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := encoding.ReferenceEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(ref.Data()), `{"apiVersion":"v1","kind":"Node","name":"node-1","uid":"uid-node-1","resourceVersion":"4"}`; got != want {
		t.Errorf("reference data = %s, want %s", got, want)
	}
}

func TestASnapshotMarkerHasNoReferenceEvent(t *testing.T) {
	c := sinktest.Change(informer.OpSnapshotCompleted, "", "", 0)
	c.Object, c.Key, c.SnapshotID = nil, sinktest.Resource.KeyPrefix, "s1"
	ev, err := encoding.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := encoding.ReferenceEvent(ev); err == nil {
		t.Error("ReferenceEvent of a snapshot marker succeeded, want an error: a marker names no object")
	}
}

func TestAReferenceEventCarriesItsDataAsAPlainJSONObjectNeverAsBase64(t *testing.T) {
	ev, err := encoding.New(sinktest.Change(informer.OpUpdated, "team-a", "big", 9))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := encoding.ReferenceEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if ce := ref.CloudEvent(); ref.DataContentType() != "application/json" || ce.DataBase64 {
		t.Errorf("datacontenttype %q, base64 %v; want application/json and plain data", ref.DataContentType(), ce.DataBase64)
	}
	body, err := json.Marshal(ref) // the JSON event format, as structured mode sends it
	if err != nil {
		t.Fatal(err)
	}
	if data := sinktest.ReferenceData(t, true, body); data["name"] != "big" {
		t.Errorf("the reference data does not name the object: %v", data)
	}
}
