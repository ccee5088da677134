package informer

import (
	"log/slog"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/internal/shape"
)

func shapedListener(t testing.TB, cfg config.Resource) (*Watcher, *recording) {
	t.Helper()
	out := &recording{}
	if cfg.Version == "" {
		cfg.Version, cfg.Resource = "v1", "configmaps"
	}
	w := NewWatcher(Options{Cluster: "c", Out: out, Resource: cfg, Logger: slog.New(slog.DiscardHandler)})
	w.res = NewResource("c", cfg.GVR(), "ConfigMap", true)
	s, err := newShaper(cfg, w.name, w.log)
	if err != nil {
		t.Fatal(err)
	}
	w.shape = s
	return w, out
}

func labelled(rv, team, v string) *unstructured.Unstructured {
	u := obj(rv)
	u.SetLabels(map[string]string{"team": team})
	u.Object["data"] = map[string]any{"v": v}
	return u
}

func TestTheListenerAppliesFilterSuppressionAndKeyBy(t *testing.T) {
	w, out := shapedListener(t, config.Resource{Filter: "object.metadata.labels['team'] == 'payments'"})
	w.onAdd(labelled("1", "search", "a"), false)                               // filtered out
	w.onAdd(labelled("2", "payments", "a"), false)                             // kept
	w.onUpdate(labelled("2", "payments", "a"), labelled("3", "payments", "a")) // no-op: suppressed
	w.onUpdate(labelled("3", "payments", "a"), labelled("4", "payments", "b")) // kept
	w.onDelete(labelled("5", "search", "b"))                                   // filtered out
	if len(*out) != 2 || (*out)[0].Op != OpAdded || (*out)[1].Op != OpUpdated {
		t.Fatalf("got %+v", *out)
	}

	// A filter that fails at runtime keeps the event.
	w, out = shapedListener(t, config.Resource{Filter: "object.metadata.labels['missing'] == 'x'"})
	w.onAdd(labelled("1", "search", "a"), false)
	if len(*out) != 1 {
		t.Fatalf("a failing filter dropped the event: %+v", *out)
	}

	ev := &unstructured.Unstructured{Object: map[string]any{"involvedObject": map[string]any{"kind": "Pod", "namespace": "ns", "name": "web-1"}}}
	ev.SetNamespace("ns")
	ev.SetName("web-1.17a")
	w, out = shapedListener(t, config.Resource{Version: "v1", Resource: "events", KeyBy: shape.KeyByInvolvedObject})
	w.res = NewResource("c", schema.GroupVersionResource{Version: "v1", Resource: "events"}, "Event", true)
	w.onAdd(ev, false)
	if len(*out) != 1 || (*out)[0].Key != "events/Pod/ns/web-1" {
		t.Fatalf("got %+v", *out)
	}
}

// BenchmarkListenerShaping compares the listener's update path without a
// shaper, with every step configured off (updates: all, no filter), and
// with the default no-op suppression. "off" must cost what "none" costs.
func BenchmarkListenerShaping(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  *config.Resource
	}{
		{"none", nil},
		{"off", &config.Resource{Updates: shape.UpdatesAll}},
		{"default", &config.Resource{}},
		{"filter", &config.Resource{Updates: shape.UpdatesAll, Filter: "object.metadata.labels['team'] == 'payments'"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var w *Watcher
			if bc.cfg == nil {
				w, _ = listenerFor()
			} else {
				w, _ = shapedListener(b, *bc.cfg)
			}
			w.opt.Out = discard{}
			old, cur := labelled("1", "payments", "a"), labelled("2", "payments", "b")
			b.ReportAllocs()
			for b.Loop() {
				w.onUpdate(old, cur)
			}
		})
	}
}

type discard struct{}

func (discard) Enqueue(*Change) {}
