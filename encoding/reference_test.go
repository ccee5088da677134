package encoding_test

import (
	"encoding/json"
	"testing"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

func TestAReferenceEventNamesTheObjectAndIsMarked(t *testing.T) {
	ev, err := encoding.Event(sinktest.Change(informer.OpUpdated, "team-a", "big", 9))
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
	var data map[string]any
	if err := json.Unmarshal(ref.Data(), &data); err != nil {
		t.Fatal(err)
	}
	md, _ := data["metadata"].(map[string]any)
	if data["kind"] != "Widget" || data["apiVersion"] != "demo.kubewire.io/v1" || md["name"] != "big" ||
		md["namespace"] != "team-a" || md["resourceVersion"] != "9" || md["uid"] != "uid-team-a-big" {
		t.Errorf("reference data = %s", ref.Data())
	}
	if _, ok := ev.Extensions()[encoding.ExtPayload]; ok {
		t.Error("ReferenceEvent modified the original event")
	}
}

func TestAReferenceEventCarriesItsDataAsAPlainJSONObjectNeverAsBase64(t *testing.T) {
	ev, err := encoding.Event(sinktest.Change(informer.OpUpdated, "team-a", "big", 9))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := encoding.ReferenceEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if ref.DataContentType() != "application/json" || ref.DataBase64 {
		t.Errorf("datacontenttype %q, base64 %v; want application/json and plain data", ref.DataContentType(), ref.DataBase64)
	}
	body, err := json.Marshal(ref) // the JSON event format, as structured mode sends it
	if err != nil {
		t.Fatal(err)
	}
	if data := sinktest.ReferenceData(t, true, body); data["name"] == nil && data["metadata"] == nil {
		t.Errorf("the reference data does not name the object: %v", data)
	}
}
