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
