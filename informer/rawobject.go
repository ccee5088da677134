package informer

import (
	"bytes"
	"unsafe"

	"github.com/tidwall/gjson"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/kubewire/kubewire/informer/raw"
)

// rawObject is an Object of the raw cache (cache: raw, the default): the
// served bytes and the few metadata fields raw.New parsed. It decodes only
// for the shaping that needs the content (a filter, ignorePaths), so a
// resource without those pays no decode at all.
type rawObject struct{ *raw.Object }

// GetAPIVersion and GetKind are read from the bytes: only reference
// payloads need them.
func (o rawObject) GetAPIVersion() string { return o.Get("apiVersion").String() }
func (o rawObject) GetKind() string       { return o.Get("kind").String() }

// Data is the cached bytes themselves: no decode, no marshal, no copy.
// Their capacity equals their length, so a careless append copies rather
// than writes into another object.
func (o rawObject) Data() ([]byte, error) { return o.JSON, nil }

func (o rawObject) Size() int64 { return int64(len(o.JSON)) }

func (o rawObject) generation() int64 { return o.GetGeneration() }

// content decodes with integers as int64, as the unstructured cache holds
// them, so a filter or ignorePaths sees the same values on either cache.
func (o rawObject) content() (map[string]any, error) {
	var m map[string]any
	err := json.Unmarshal(o.JSON, &m)
	return m, err
}

// unchangedSince compares bytes instead of decoded maps; see
// sameExceptResourceVersion for why that is sound.
func (o rawObject) unchangedSince(old Object) bool {
	prev, ok := old.(rawObject)
	return ok && sameExceptResourceVersion(prev.Object, o.Object)
}

// key was built with the object when the ListerWatcher was given the
// resource's prefix (ListWatchOptions.KeyPrefix), as the informer's is.
func (o rawObject) key(prefix string) string { return o.PrefixedKey(prefix) }

// reference reads the field's string members without decoding the rest of
// the object.
func (o rawObject) reference(name string) map[string]any {
	m := map[string]any{}
	o.Get(name).ForEach(func(k, v gjson.Result) bool {
		if v.Type == gjson.String {
			m[k.Str] = v.Str
		}
		return true
	})
	return m
}

// sameExceptResourceVersion reports whether two objects' bytes differ only
// in metadata.resourceVersion. The apiserver writes an object's JSON
// deterministically, so equal content means equal bytes; a false
// "different" would only emit an update that the unstructured path
// suppresses, never lose one.
func sameExceptResourceVersion(oa, ob *raw.Object) bool {
	a, b := oa.JSON, ob.JSON
	if len(a)-len(b) > 32 || len(b)-len(a) > 32 {
		return false
	}
	ia, ja := rvSpan(oa)
	ib, jb := rvSpan(ob)
	return bytes.Equal(a[:ia], b[:ib]) && bytes.Equal(a[ja:], b[jb:])
}

// rvSpan is where the resourceVersion's value is in o.JSON; New found it
// for every object the apiserver serves, so the search here is for the
// others (an escaped or missing value).
func rvSpan(o *raw.Object) (int, int) {
	if i, j, ok := o.ResourceVersionSpan(); ok {
		return i, j
	}
	r := gjson.Get(unsafeString(o.JSON), "metadata.resourceVersion")
	if !r.Exists() {
		return len(o.JSON), len(o.JSON)
	}
	return r.Index, r.Index + len(r.Raw)
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
