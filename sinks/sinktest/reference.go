package sinktest

import (
	"encoding/json"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/event/datacodec"
)

// ReferenceData checks the body of a broker message that carries a
// reference event (encoding.ReferenceEvent) the way a consumer reads it, and
// returns the event's data as a JSON object. In structured mode the body is
// the JSON event format: its data must be a plain JSON object under "data"
// and never "data_base64" (datacontenttype says application/json, and a
// consumer such as Python's cloudevents SDK would otherwise get bytes), both
// as raw JSON and as sdk-go's format reads it. In binary mode the body is
// the data itself, a JSON object.
func ReferenceData(t testing.TB, structured bool, body []byte) map[string]any {
	t.Helper()
	if !structured {
		var data map[string]any
		if err := json.Unmarshal(body, &data); err != nil {
			t.Fatalf("the binary-mode body of a reference event is not a JSON object: %v: %s", err, body)
		}
		return data
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("the structured body is not JSON: %v: %s", err, body)
	}
	if _, ok := raw["data_base64"]; ok {
		t.Errorf("the structured reference event carries data_base64, want plain JSON data: %s", body)
	}
	var data map[string]any
	if err := json.Unmarshal(raw["data"], &data); err != nil || data == nil {
		t.Errorf("the structured reference event's data is not a JSON object (%v): %s", err, raw["data"])
	}
	var ev event.Event
	if err := format.JSON.Unmarshal(body, &ev); err != nil {
		t.Fatalf("sdk-go cannot read the structured reference event: %v", err)
	}
	if ev.DataBase64 {
		t.Error("sdk-go reads the reference event's data as base64, want plain JSON")
	}
	var viaSDK map[string]any
	if err := datacodec.Decode(t.Context(), ev.DataMediaType(), ev.Data(), &viaSDK); err != nil {
		t.Errorf("sdk-go cannot decode the reference event's data as %s: %v", ev.DataMediaType(), err)
	}
	return data
}
