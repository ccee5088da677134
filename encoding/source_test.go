package encoding_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

func TestParseSourceReadsBackTheClusterAndResourceOfEveryResourceSource(t *testing.T) {
	cases := []struct {
		name string
		src  encoding.Source
	}{
		{"A core-group resource has no group.", encoding.Source{Cluster: "demo", Version: "v1", Resource: "configmaps"}},
		{"A named group is read back.", encoding.Source{Cluster: "prod.eu", Group: "apps", Version: "v1", Resource: "deployments"}},
		{"An empty cluster is read back empty.", encoding.Source{Group: "example.com", Version: "v1beta1", Resource: "widgets"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gvr := schema.GroupVersionResource{Group: c.src.Group, Version: c.src.Version, Resource: c.src.Resource}
			src := informer.NewResource(c.src.Cluster, gvr, "Thing", true).Source
			got, ok := encoding.ParseSource(src)
			if !ok || got != c.src {
				t.Errorf("ParseSource(%q) = %+v, %v; want %+v, true", src, got, ok, c.src)
			}
		})
	}
}

func TestParseSourceRefusesWhatIsNotAResourceSource(t *testing.T) {
	for _, src := range []string{"", "/", "https://example.com/x", "/clusters/demo/api/v1", "/clusters/demo/apis/apps/v1",
		"/clusters/demo/api/g/v1/r", "/cluster/demo/api/v1/r", "/clusters/demo/apis/g/v1/r/extra"} {
		if got, ok := encoding.ParseSource(src); ok {
			t.Errorf("ParseSource(%q) = %+v, true; want false", src, got)
		}
	}
}
