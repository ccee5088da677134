package kafka_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

func mustEvent(t testing.TB, c *informer.Change) *encoding.Event {
	t.Helper()
	ev, err := encoding.New(c)
	if err != nil {
		t.Fatalf("encoding %s: %v", c.Key, err)
	}
	return ev
}

// sameEvent checks that got carries every attribute, extension and the data
// of want.
func sameEvent(t *testing.T, want *encoding.Event, got *event.Event) {
	t.Helper()
	check := func(what string, w, g any) {
		if !reflect.DeepEqual(w, g) {
			t.Errorf("%s: got %v, want %v", what, g, w)
		}
	}
	check("specversion", want.SpecVersion(), got.SpecVersion())
	check("id", want.ID(), got.ID())
	check("type", want.Type(), got.Type())
	check("source", want.Source(), got.Source())
	check("subject", want.Subject(), got.Subject())
	check("datacontenttype", want.DataContentType(), got.DataContentType())
	if !want.Time().Equal(got.Time()) {
		t.Errorf("time: got %s, want %s", got.Time(), want.Time())
	}
	check("extensions", formatAll(want.Extensions()), formatAll(got.Extensions()))
	var w, g any
	if json.Unmarshal(want.Data(), &w) != nil || json.Unmarshal(got.Data(), &g) != nil || !reflect.DeepEqual(w, g) {
		t.Errorf("data: got %s, want %s", got.Data(), want.Data())
	}
}

func formatAll(ext map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range ext {
		s, _ := types.Format(v)
		out[k] = s
	}
	return out
}
