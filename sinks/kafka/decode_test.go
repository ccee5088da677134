package kafka_test

import (
	"encoding/json"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/kafka"
)

func TestDecodeMessageReadsBackBothContentModesAndTombstones(t *testing.T) {
	r := informer.NewResource("c", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "Deployment", true)
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(2)}}}
	u.SetNamespace("ns")
	u.SetName("web ünïcode %20")
	u.SetUID("u-1")
	u.SetResourceVersion("7")
	ev, err := encoding.New(&informer.Change{Op: informer.OpUpdated, Resource: r, Key: r.ObjectKey("ns", u.GetName()), Object: informer.FromUnstructured(u), Observed: time.Unix(1700000000, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	for _, structured := range []bool{false, true} {
		m := kafka.EncodeMessage(ev, structured)
		got, err := kafka.DecodeMessage(m)
		if err != nil {
			t.Fatalf("structured=%v: %v", structured, err)
		}
		a, _ := json.Marshal(ev)
		b, _ := json.Marshal(got)
		var x, y any
		_ = json.Unmarshal(a, &x)
		_ = json.Unmarshal(b, &y)
		ja, _ := json.Marshal(x)
		jb, _ := json.Marshal(y)
		if string(ja) != string(jb) {
			t.Errorf("structured=%v: decoded event differs\nsent %s\ngot  %s", structured, ja, jb)
		}
	}
	if got, err := kafka.DecodeMessage(kafkago.Message{Key: []byte("k")}); got != nil || err != nil {
		t.Errorf("a tombstone decoded to %v, %v; want nil, nil", got, err)
	}
}
