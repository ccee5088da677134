package informer

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/shape"
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
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			w, out := shapedListener(t, config.Resource{Filter: "object.metadata.labels['team'] == 'payments'"})
			w.onAdd(tc.labelled(t, "1", "search", "a"), false)                                     // filtered out
			w.onAdd(tc.labelled(t, "2", "payments", "a"), false)                                   // kept
			w.onUpdate(tc.labelled(t, "2", "payments", "a"), tc.labelled(t, "3", "payments", "a")) // no-op: suppressed
			w.onUpdate(tc.labelled(t, "3", "payments", "a"), tc.labelled(t, "4", "payments", "b")) // kept
			w.onDelete(tc.labelled(t, "5", "search", "b"))                                         // filtered out
			if len(*out) != 2 || (*out)[0].Op != OpAdded || (*out)[1].Op != OpUpdated {
				t.Fatalf("got %+v", *out)
			}

			// A filter that fails at runtime keeps the event.
			w, out = shapedListener(t, config.Resource{Filter: "object.metadata.labels['missing'] == 'x'"})
			w.onAdd(tc.labelled(t, "1", "search", "a"), false)
			if len(*out) != 1 {
				t.Fatalf("a failing filter dropped the event: %+v", *out)
			}

			ev := tc.object(t, `{"involvedObject":{"kind":"Pod","namespace":"ns","name":"web-1"},"metadata":{"namespace":"ns","name":"web-1.17a"}}`)
			w, out = shapedListener(t, config.Resource{Version: "v1", Resource: "events", KeyBy: shape.KeyByInvolvedObject})
			w.res = NewResource("c", schema.GroupVersionResource{Version: "v1", Resource: "events"}, "Event", true)
			w.onAdd(ev, false)
			if len(*out) != 1 || (*out)[0].Key != "events/Pod/ns/web-1" {
				t.Fatalf("got %+v", *out)
			}
		})
	}
}

func TestTheUpdateModesSuppressTheSameUpdatesOnEitherCache(t *testing.T) {
	// Four states of one object: the second changes only data.noise, the
	// third is a spec edit (generation 2), the fourth changes nothing but
	// the resourceVersion.
	states := []string{"1,1,a,x", "2,1,a,y", "3,2,b,y", "4,2,b,y"}
	at := func(tc cacheCase, t *testing.T, s string) any {
		f := strings.Split(s, ",")
		return tc.object(t, fmt.Sprintf(`{"metadata":{"namespace":"ns","name":"cm","uid":"u1","resourceVersion":%q,"generation":%s},"data":{"v":%q,"noise":%q}}`,
			f[0], f[1], f[2], f[3]))
	}
	for _, mode := range []struct {
		name string
		cfg  config.Resource
		// emitted are the resourceVersions of the updates emitted, and
		// suppressed how many were suppressed for each reason.
		emitted    []string
		suppressed map[string]float64
	}{
		{"updates: all", config.Resource{Updates: shape.UpdatesAll}, []string{"2", "3", "4"}, nil},
		{"updates: changed", config.Resource{}, []string{"2", "3"}, map[string]float64{shape.ReasonUnchanged: 1}},
		{"updates: changed with ignorePaths", config.Resource{IgnorePaths: []string{"data.noise"}}, []string{"3"},
			map[string]float64{shape.ReasonIgnored: 1, shape.ReasonUnchanged: 1}},
		{"updates: generationChanged", config.Resource{Updates: shape.UpdatesGenerationChanged}, []string{"3"},
			map[string]float64{shape.ReasonGeneration: 2}},
	} {
		for _, tc := range caches {
			t.Run(mode.name+" "+tc.name, func(t *testing.T) {
				w, out := shapedListener(t, mode.cfg)
				reasons := []string{shape.ReasonUnchanged, shape.ReasonIgnored, shape.ReasonGeneration}
				before := map[string]float64{}
				for _, r := range reasons {
					before[r] = testutil.ToFloat64(metrics.UpdatesSuppressed.WithLabelValues(w.name, r))
				}
				for i := 1; i < len(states); i++ {
					w.onUpdate(at(tc, t, states[i-1]), at(tc, t, states[i]))
				}
				var got []string
				for _, c := range *out {
					got = append(got, objectRV(c))
				}
				if !slices.Equal(got, mode.emitted) {
					t.Errorf("emitted updates to %v, want %v", got, mode.emitted)
				}
				for _, r := range reasons {
					if n := testutil.ToFloat64(metrics.UpdatesSuppressed.WithLabelValues(w.name, r)) - before[r]; n != mode.suppressed[r] {
						t.Errorf("suppressed %v updates as %s, want %v", n, r, mode.suppressed[r])
					}
				}
			})
		}
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
