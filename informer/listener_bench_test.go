package informer

import (
	"fmt"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// discardOutput is an Output that drops every Change, so the benchmark
// measures the listener alone. The Change still escapes through the
// interface, as it does into a real dispatcher.
type discardOutput struct{}

func (discardOutput) Enqueue(*Change) {}

func benchWatcher(k benchdata.Kind) *Watcher {
	w := NewWatcher(Options{Cluster: "bench", Out: discardOutput{}, Resource: config.Resource{
		Group: k.GVR.Group, Version: k.GVR.Version, Resource: k.GVR.Resource,
	}})
	w.res = NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	// The default shaping, as Run sets it up: updates that change nothing
	// but the resourceVersion are suppressed, which costs a comparison of
	// the two objects per update.
	shp, err := newShaper(w.cfg, w.name, w.log)
	if err != nil {
		panic(err)
	}
	w.shape = shp
	return w
}

// cached is object i as the informer caches it: decoded, managedFields
// stripped by the transform.
func cached(k benchdata.Kind, i int, rv int64) *unstructured.Unstructured {
	u := k.Object(benchdata.DefaultSeed, i, rv)
	if _, err := stripManagedFields(u); err != nil {
		panic(err)
	}
	return u
}

// BenchmarkListenerUpdate is the listener stage: an informer update
// notification checked against the default shaping (suppression of
// unchanged updates) and turned into a Change handed to the Output.
func BenchmarkListenerUpdate(b *testing.B) {
	for _, k := range benchdata.Kinds {
		b.Run(k.Name, func(b *testing.B) {
			w := benchWatcher(k)
			old, cur := cached(k, 0, 1), cached(k, 0, 2)
			// A real change, or the update would be suppressed.
			cur.SetAnnotations(map[string]string{benchdata.SeqAnnotation: "2"})
			b.ReportAllocs()
			for b.Loop() {
				w.onUpdate(old, cur)
			}
		})
	}
}

// BenchmarkListenerAdd covers the initial list: a synced snapshot record per
// object.
func BenchmarkListenerAdd(b *testing.B) {
	k := benchdata.Pods
	w := benchWatcher(k)
	w.initialID = newSnapshotID()
	u := cached(k, 0, 1)
	b.ReportAllocs()
	for b.Loop() {
		w.onAdd(u, true)
	}
}

// rawCached is object i as the raw cache (the default) holds it, carrying
// seq in the annotation a replayed live event changes: two states of one
// object then differ in a few bytes, as most real updates do, and the
// suppression's byte comparison runs in full.
func rawCached(k benchdata.Kind, i int, rv int64, seq string) *raw.Object {
	m := k.New(benchdata.DefaultSeed, i)
	md := m["metadata"].(map[string]any)
	md["resourceVersion"] = strconv.FormatInt(rv, 10)
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[benchdata.SeqAnnotation] = seq
	// With the key prefix, as the informer's ListerWatcher builds them.
	prefix := NewResource("bench", k.GVR, k.Kind, k.Namespaced).KeyPrefix
	o, err := raw.New(benchdata.Marshal(m), raw.BuildOptions{KeyPrefix: prefix})
	if err != nil {
		panic(err)
	}
	return o
}

// BenchmarkListenerUpdateRaw is BenchmarkListenerUpdate on the raw cache.
func BenchmarkListenerUpdateRaw(b *testing.B) {
	for _, k := range benchdata.Kinds {
		b.Run(k.Name, func(b *testing.B) {
			w := benchWatcher(k)
			old, cur := rawCached(k, 0, 1, "1"), rawCached(k, 0, 2, "2")
			b.ReportAllocs()
			for b.Loop() {
				w.onUpdate(old, cur)
			}
		})
	}
}

// BenchmarkListenerAddRaw is BenchmarkListenerAdd on the raw cache.
func BenchmarkListenerAddRaw(b *testing.B) {
	k := benchdata.Pods
	w := benchWatcher(k)
	w.initialID = newSnapshotID()
	o := rawCached(k, 0, 1, "1")
	b.ReportAllocs()
	for b.Loop() {
		w.onAdd(o, true)
	}
}

// BenchmarkDecodeAndTransform is what happens to every watch event before
// the listener sees it: client-go decodes the JSON object into unstructured
// maps, and the informer's transform strips managedFields before caching.
// It is client-go's code, but kubewire chose both the unstructured type and
// the transform, and it is the dominant cost per event.
func BenchmarkDecodeAndTransform(b *testing.B) {
	cases := []struct {
		name string
		json []byte
	}{{"reference-pod", benchdata.ReferencePod()}}
	for _, k := range benchdata.Kinds {
		cases = append(cases, struct {
			name string
			json []byte
		}{k.Name, k.JSON(benchdata.DefaultSeed, 0, 1)})
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("%s/%dB", c.name, len(c.json)), func(b *testing.B) {
			b.SetBytes(int64(len(c.json)))
			b.ReportAllocs()
			for b.Loop() {
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(c.json); err != nil {
					b.Fatal(err)
				}
				if _, err := stripManagedFields(u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
