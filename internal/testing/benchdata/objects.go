// Package benchdata generates the realistic, deterministic Kubernetes objects
// the benchmarks feed through kubewire, and replays them as a kube-apiserver
// would send them (see Replay).
//
// Every object is a function of (seed, index) alone: the same pair gives the
// same bytes on every machine and in every order, so a benchmark result can be
// compared with an earlier one knowing the input did not move.
package benchdata

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// referencePod is the reference Pod: a compact 7.0 KB Pod with status and
// managedFields, kept in the repository. The reference figures in
// docs/benchmarks.md ("What is measured, and on what") are for this object.
//
//go:embed testdata/pod.json
var referencePod []byte

// ReferencePod returns the 7 KB reference Pod as JSON.
func ReferencePod() []byte { return append([]byte(nil), referencePod...) }

// DefaultSeed is the seed the checked-in benchmark results were taken with.
const DefaultSeed = 7

// Kind is one kind of generated object and where its API serves it.
type Kind struct {
	// Name labels benchmarks: "pod", "configmap", "widget".
	Name       string
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// New returns object i of the given seed, without a resourceVersion.
	New func(seed uint64, i int) map[string]any
}

// The kinds the benchmarks use: ~10 KB Pods, ~2 KB ConfigMaps and a ~100 KB
// custom resource.
var (
	Pods       = Kind{Name: "pod", GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: "Pod", Namespaced: true, New: Pod}
	ConfigMaps = Kind{Name: "configmap", GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true, New: ConfigMap}
	Widgets    = Kind{Name: "widget", GVR: schema.GroupVersionResource{Group: "bench.kubewire.io", Version: "v1", Resource: "widgets"}, Kind: "Widget", Namespaced: true, New: Widget}
	Kinds      = []Kind{Pods, ConfigMaps, Widgets}
)

// APIVersion is the kind's apiVersion ("v1", "bench.kubewire.io/v1").
func (k Kind) APIVersion() string { return k.GVR.GroupVersion().String() }

// Object returns object i as the client would decode it, with the given
// resourceVersion.
func (k Kind) Object(seed uint64, i int, rv int64) *unstructured.Unstructured {
	return Decode(k.JSON(seed, i, rv))
}

// JSON returns object i, with the given resourceVersion, as the apiserver
// would serialise it.
func (k Kind) JSON(seed uint64, i int, rv int64) []byte {
	o := k.New(seed, i)
	o["metadata"].(map[string]any)["resourceVersion"] = strconv.FormatInt(rv, 10)
	return Marshal(o)
}

// Marshal is encoding/json with sorted keys, as the apiserver's output is
// for unstructured objects. It panics on error, which only a bug in this
// package can cause.
func Marshal(o map[string]any) []byte {
	b, err := json.Marshal(o)
	if err != nil {
		panic(fmt.Sprintf("benchdata: marshal: %v", err))
	}
	return b
}

// Decode decodes JSON the way client-go's dynamic client does, into
// unstructured maps with int64 numbers.
func Decode(b []byte) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		panic(fmt.Sprintf("benchdata: decode: %v", err))
	}
	return u
}

// gen draws the random parts of one object. Seeding it with (seed, index)
// keeps objects independent of generation order.
type gen struct{ r *rand.Rand }

func newGen(seed uint64, i int) gen {
	return gen{rand.New(rand.NewPCG(seed, uint64(i)))}
}

const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"

func (g gen) word(n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(alnum[g.r.IntN(len(alnum))])
	}
	return b.String()
}

func (g gen) hex(n int) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	for range n {
		b.WriteByte(digits[g.r.IntN(16)])
	}
	return b.String()
}

func (g gen) pick(s ...string) string { return s[g.r.IntN(len(s))] }

func (g gen) uid() string {
	h := g.hex(32)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (g gen) ip(prefix string) string {
	return prefix + strconv.Itoa(g.r.IntN(250)+1) + "." + strconv.Itoa(g.r.IntN(250)+1)
}

// stamp is a creation-like timestamp spread over one day of 2026.
func (g gen) stamp() string {
	s := g.r.IntN(86400)
	return fmt.Sprintf("2026-11-20T%02d:%02d:%02dZ", s/3600, s/60%60, s%60)
}

var teams = []string{"payments", "search", "checkout", "identity", "platform", "billing", "ml", "edge"}

func (g gen) namespace() string { return "team-" + g.pick(teams...) }

// fieldsV1 derives the FieldsV1 set a field manager records for v: "f:" for
// every map key, "k:" for list items keyed by name, type, ip or port, and
// "v:" for set-like lists of strings. Deriving it keeps managedFields in
// proportion to the object, as the apiserver's is.
func fieldsV1(v any) map[string]any {
	out := map[string]any{}
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			out["f:"+k] = fieldsV1(c)
		}
	case []any:
		for _, item := range t {
			m, ok := item.(map[string]any)
			if !ok {
				continue
			}
			for _, key := range []string{"name", "type", "ip", "containerPort", "mountPath", "key"} {
				if kv, ok := m[key]; ok {
					kb, _ := json.Marshal(map[string]any{key: kv})
					f := fieldsV1(m)
					f["."] = map[string]any{}
					out["k:"+string(kb)] = f
					break
				}
			}
		}
		if len(out) > 0 {
			out["."] = map[string]any{}
		}
	}
	return out
}

func managed(manager, op, subresource, apiVersion, time string, fields map[string]any) map[string]any {
	m := map[string]any{
		"apiVersion": apiVersion,
		"fieldsType": "FieldsV1",
		"fieldsV1":   fields,
		"manager":    manager,
		"operation":  op,
		"time":       time,
	}
	if subresource != "" {
		m["subresource"] = subresource
	}
	return m
}

func obj(apiVersion, kind string, meta map[string]any) map[string]any {
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
}

func list[T any](n int, f func(int) T) []any {
	out := make([]any, n)
	for i := range n {
		out[i] = f(i)
	}
	return out
}

// Cached returns object i as kubewire's informer caches it by default:
// decoded, with metadata.managedFields stripped by the transform.
func (k Kind) Cached(seed uint64, i int, rv int64) *unstructured.Unstructured {
	u := k.Object(seed, i, rv)
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	return u
}
