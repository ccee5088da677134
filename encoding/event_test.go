package encoding_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

func widget() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": int64(3)}}}
	u.SetAPIVersion("demo.kubewire.io/v1")
	u.SetKind("Widget")
	u.SetNamespace("team-a")
	u.SetName("w1")
	u.SetUID("0b5e")
	u.SetResourceVersion("42")
	return u
}

func TestAnObjectEventFollowsTheContract(t *testing.T) {
	r := informer.NewResource("prod", schema.GroupVersionResource{Group: "demo.kubewire.io", Version: "v1", Resource: "widgets"}, "Widget", true)
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ev, err := encoding.New(&informer.Change{Op: informer.OpDeleted, Resource: r, Key: r.ObjectKey("team-a", "w1"), Object: informer.FromUnstructured(widget()), FinalStateUnknown: true, Observed: at})
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string][2]string{
		"specversion":     {ev.SpecVersion(), "1.0"},
		"id":              {ev.ID(), "0b5e/42/deleted"},
		"source":          {ev.Source(), "/clusters/prod/apis/demo.kubewire.io/v1/widgets"},
		"type":            {ev.Type(), "io.kubewire.object.deleted"},
		"subject":         {ev.Subject(), "team-a/w1"},
		"datacontenttype": {ev.DataContentType(), "application/json"},
		"time":            {ev.Time().Format(time.RFC3339), "2026-11-23T10:00:00Z"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %q, want %q", name, c[0], c[1])
		}
	}
	wantExt := map[string]string{
		"partitionkey": "widgets.demo.kubewire.io/team-a/w1", "apiversion": "demo.kubewire.io/v1", "kind": "Widget",
		"namespace": "team-a", "name": "w1", "uid": "0b5e", "resourceversion": "42", "cluster": "prod", "finalstateunknown": "true",
	}
	if len(ev.Extensions()) != len(wantExt) {
		t.Errorf("extensions %v, want %v", ev.Extensions(), wantExt)
	}
	for k, v := range wantExt {
		if got := ev.Extensions()[k]; got != v {
			t.Errorf("extension %s = %v, want %q", k, got, v)
		}
	}
	structured, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var envelope struct {
		Data       map[string]any `json:"data"`
		DataBase64 *string        `json:"data_base64"`
	}
	if err := json.Unmarshal(structured, &envelope); err != nil || envelope.DataBase64 != nil || envelope.Data["kind"] != "Widget" {
		t.Errorf("structured mode must carry the object as JSON in data, got %s", structured)
	}
	var data map[string]any
	if err := json.Unmarshal(ev.Data(), &data); err != nil || data["spec"].(map[string]any)["size"] != float64(3) {
		t.Errorf("data %s (%v)", ev.Data(), err)
	}
}

func TestCoreGroupClusterScopedAndSnapshotRecordsUseTheirForms(t *testing.T) {
	r := informer.NewResource("prod", schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "Namespace", false)
	u := &unstructured.Unstructured{}
	u.SetName("team-a")
	u.SetUID("u9")
	u.SetResourceVersion("7")
	ev, err := encoding.New(&informer.Change{Op: informer.OpSynced, Resource: r, Key: r.ObjectKey("", "team-a"), Object: informer.FromUnstructured(u), SnapshotID: "s1", Observed: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Source() != "/clusters/prod/api/v1/namespaces" || ev.Subject() != "team-a" || ev.ID() != "u9/7/synced/s1" ||
		ev.Extensions()["partitionkey"] != "namespaces/team-a" || ev.Extensions()["snapshotid"] != "s1" {
		t.Fatalf("got source %q subject %q id %q ext %v", ev.Source(), ev.Subject(), ev.ID(), ev.Extensions())
	}
	if _, ok := ev.Extensions()["namespace"]; ok {
		t.Error("a cluster-scoped object carries a namespace extension")
	}
}

func TestSnapshotMarkersCarryTheirIDAndCount(t *testing.T) {
	r := informer.NewResource("prod", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)
	ev, err := encoding.New(&informer.Change{Op: informer.OpSnapshotCompleted, Resource: r, Key: r.KeyPrefix, SnapshotID: "s2", Count: 12, Observed: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var m encoding.SnapshotMarker
	_ = json.Unmarshal(ev.Data(), &m)
	if ev.Type() != encoding.TypeSnapshotCompleted || ev.ID() != "s2/completed" || ev.Extensions()["partitionkey"] != "configmaps" ||
		m.Count == nil || *m.Count != 12 || m.SnapshotID != "s2" || m.Resource != "configmaps" {
		t.Fatalf("got %s %s %v %s", ev.Type(), ev.ID(), ev.Extensions(), ev.Data())
	}
}

func TestSnapshotMarkersCarryTheResourceVersionOfTheirListAsAStringExtension(t *testing.T) {
	r := informer.NewResource("prod", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)
	for _, tc := range []struct {
		name string
		rv   string
		want map[string]any
	}{
		{"a marker that knows its version", "4711", map[string]any{"snapshotrv": "4711"}},
		{"the initial started marker, sent before its list", "", map[string]any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, op := range []informer.Op{informer.OpSnapshotStarted, informer.OpSnapshotCompleted} {
				ev, err := encoding.New(&informer.Change{Op: op, Resource: r, Key: r.KeyPrefix, SnapshotID: "s3", SnapshotRV: tc.rv, Observed: time.Now()})
				if err != nil {
					t.Fatal(err)
				}
				// Read back through sdk-go, the consumers' reader, from the
				// structured JSON every binding agrees with.
				b, err := ev.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				var back event.Event
				if err := back.UnmarshalJSON(b); err != nil {
					t.Fatal(err)
				}
				got := map[string]any{}
				if v, ok := back.Extensions()["snapshotrv"]; ok {
					got["snapshotrv"] = v
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s: extensions %v, want snapshotrv as %v", op, back.Extensions(), tc.want)
				}
			}
		})
	}
}

func TestAGapEventNamesTheRangeAndHasAnIDThatARepeatShares(t *testing.T) {
	r := informer.NewResource("prod", schema.GroupVersionResource{Group: "demo.kubewire.io", Version: "v1", Resource: "widgets"}, "Widget", true)
	gap := func(ns string) *informer.Change {
		return &informer.Change{Op: informer.OpGap, Resource: r, Key: r.KeyPrefix, Observed: time.Now(),
			Gap: &informer.Gap{Namespace: ns, From: "100", To: "250", Reason: informer.GapExpired}}
	}
	for _, tc := range []struct {
		name, ns, id string
		wantExt      map[string]string
		wantData     encoding.Gap
	}{
		{
			name: "a cluster-wide watch", id: "widgets.demo.kubewire.io/gap/100-250",
			wantExt:  map[string]string{"partitionkey": "widgets.demo.kubewire.io", "cluster": "prod", "apiversion": "demo.kubewire.io/v1", "kind": "Widget"},
			wantData: encoding.Gap{Group: "demo.kubewire.io", Version: "v1", Resource: "widgets", From: "100", To: "250", Reason: "expired"},
		},
		{
			name: "one namespace's watch", ns: "team-a", id: "widgets.demo.kubewire.io/team-a/gap/100-250",
			wantExt:  map[string]string{"partitionkey": "widgets.demo.kubewire.io", "cluster": "prod", "apiversion": "demo.kubewire.io/v1", "kind": "Widget", "namespace": "team-a"},
			wantData: encoding.Gap{Group: "demo.kubewire.io", Version: "v1", Resource: "widgets", Namespace: "team-a", From: "100", To: "250", Reason: "expired"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := encoding.New(gap(tc.ns))
			if err != nil {
				t.Fatal(err)
			}
			again, _ := encoding.New(gap(tc.ns))
			if ev.Type() != encoding.TypeGap || ev.Type() != "io.kubewire.watch.gap" || ev.ID() != tc.id || again.ID() != ev.ID() || ev.Subject() != "" {
				t.Errorf("type %s id %s (again %s) subject %q", ev.Type(), ev.ID(), again.ID(), ev.Subject())
			}
			if got := ev.Extensions(); len(got) != len(tc.wantExt) {
				t.Errorf("extensions %v, want %v", got, tc.wantExt)
			}
			for k, v := range tc.wantExt {
				if got := ev.Extension(k); got != v {
					t.Errorf("extension %s = %q, want %q", k, got, v)
				}
			}
			var d encoding.Gap
			if err := json.Unmarshal(ev.Data(), &d); err != nil || d != tc.wantData {
				t.Errorf("data %s, want %+v (%v)", ev.Data(), tc.wantData, err)
			}
			if tc.ns == "" && strings.Contains(string(ev.Data()), "namespace") {
				t.Errorf("a cluster-wide gap's data names a namespace: %s", ev.Data())
			}
		})
	}
	if _, err := encoding.New(&informer.Change{Op: informer.OpGap, Resource: r, Key: r.KeyPrefix}); err == nil {
		t.Error("a gap change without its Gap was encoded")
	}
}
