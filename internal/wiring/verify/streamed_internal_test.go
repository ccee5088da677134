package verify

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
)

func TestAnObjectStreamedWithPayloadDiffIsJudgedTheSameAsTheLiveObjectWhenOnlyItsVersionDiffers(t *testing.T) {
	for _, payload := range []string{"full", "diff"} {
		t.Run(payload, func(t *testing.T) {
			rc := config.Resource{Version: "v1", Resource: "configmaps", Payload: payload}
			judge, err := informer.NewJudge(rc)
			if err != nil {
				t.Fatal(err)
			}
			live := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "a", "namespace": "ns", "resourceVersion": "8"}, "data": map[string]any{"k": "v"}}}
			want, ok := judge.Want(live)
			if !ok {
				t.Fatal("the judge does not want the object")
			}
			// The view holds the object itself, at an older version whose
			// update was suppressed as identical.
			held := Object{ResourceVersion: "7", Data: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"k":"v"}}`)}
			if !judge.Same(held.ResourceVersion, streamed(rc, held), want) {
				t.Errorf("payload %s: the held object is not judged the same as the live one", payload)
			}
		})
	}
}
