package informer

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/config"
)

// cacheCase is one of the two caches a resource's informer can hold its
// objects in. The handler tests run on both: raw is the default, and
// unstructured the fallback that must behave the same.
type cacheCase struct{ name, cache string }

// caches names each cache explicitly: "" is the default, raw, so it
// cannot stand for the unstructured cache.
var caches = []cacheCase{
	{"on the unstructured cache", config.CacheUnstructured},
	{"on the raw cache", config.CacheRaw},
}

// object returns the object of js as this cache hands it to the handlers:
// decoded into int64-numbered maps with managedFields stripped, as the
// dynamic client and the informer's transform leave it, or built by raw.New
// as the raw ListerWatcher builds it.
func (c cacheCase) object(tb testing.TB, js string) any {
	tb.Helper()
	if c.cache == config.CacheRaw {
		o, err := raw.New([]byte(js), raw.BuildOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		return o
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		tb.Fatal(err)
	}
	u, err := stripManagedFields(&unstructured.Unstructured{Object: m})
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// named is the ConfigMap ns/<name>, uid u1, at resourceVersion rv.
func (c cacheCase) named(tb testing.TB, name, rv string) any {
	tb.Helper()
	return c.object(tb, fmt.Sprintf(`{"metadata":{"namespace":"ns","name":%q,"uid":"u1","resourceVersion":%q}}`, name, rv))
}

// obj is the ConfigMap ns/cm at resourceVersion rv.
func (c cacheCase) obj(tb testing.TB, rv string) any {
	tb.Helper()
	return c.named(tb, "cm", rv)
}

// labelled is ns/cm at rv with the label team and the data value v.
func (c cacheCase) labelled(tb testing.TB, rv, team, v string) any {
	tb.Helper()
	return c.object(tb, fmt.Sprintf(`{"metadata":{"namespace":"ns","name":"cm","uid":"u1","resourceVersion":%q,"labels":{"team":%q}},"data":{"v":%q}}`,
		rv, team, v))
}

// objectRV is the resourceVersion of a Change's object, "" for a marker.
func objectRV(c *Change) string {
	if c.Object == nil {
		return ""
	}
	return c.Object.GetResourceVersion()
}
