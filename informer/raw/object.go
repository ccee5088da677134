// Package raw is kubewire's raw-bytes cache: a runtime.Object that holds an
// object's JSON as the apiserver served it, and a ListerWatcher that fills a
// client-go SharedIndexInformer with such objects without decoding them.
//
// Why: a dynamic informer's unstructured object retains about 4 to 7 times
// its JSON in heap and costs a full decode per event, then a full re-encode
// to publish it. The raw object keeps the bytes (with managedFields cut) and
// only the handful of metadata fields that keys, the reflector and events
// need; the bytes go to the broker unchanged.
package raw

import (
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// ChangedBy is the newest entry of an object's managedFields, read at the
// byte level before they are cut.
type ChangedBy struct {
	Manager, Operation, Time string
}

// Object is one Kubernetes object as JSON. It is immutable: the informer
// shares it between the cache, its listeners and every sink, and its string
// fields point into JSON. The metav1.Object setters therefore do nothing
// (nothing in the informer machinery calls them); build a new Object instead.
type Object struct {
	// JSON is the object exactly as served, minus metadata.managedFields
	// unless they were kept, plus apiVersion and kind for list items that
	// lacked them (as client-go's unstructured decoding adds them).
	JSON []byte

	namespace, name, uid, resourceVersion string
	// key is the object's store key and prefixedKey its partition key,
	// built once by New (see Key and PrefixedKey).
	key, prefixedKey string
	generation       int64
	changedBy        ChangedBy
	hasChangedBy     bool
	// rvEnd is where metadata.resourceVersion's value ends in JSON, its
	// closing quote included, when New placed it there (0 otherwise).
	rvEnd int
}

var (
	_ runtime.Object = (*Object)(nil)
	_ metav1.Object  = (*Object)(nil)
)

// GetObjectKind returns an empty kind: the informer checks objects by Go
// type, and the apiVersion and kind are in JSON for whoever needs them.
func (o *Object) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject returns a shallow copy. That is a deep copy in effect,
// because nothing ever writes to an Object or its bytes.
func (o *Object) DeepCopyObject() runtime.Object {
	c := *o
	return &c
}

// Key is the object's key in client-go's stores, "<namespace>/<name>" or
// "<name>": what cache.MetaNamespaceKeyFunc returns for it, without the
// allocation that function makes on every call.
func (o *Object) Key() string { return o.key }

// PrefixedKey is "<prefix>/<Key>", the partition key of the resource whose
// key prefix is prefix. It was built by New when it was given that prefix
// (BuildOptions.KeyPrefix); any other prefix is concatenated on each call.
func (o *Object) PrefixedKey(prefix string) string {
	if p := o.prefixedKey; len(p) == len(prefix)+1+len(o.key) && p[:len(prefix)] == prefix {
		return p
	}
	return prefix + "/" + o.key
}

// ResourceVersionSpan returns where metadata.resourceVersion's value,
// quotes included, is in JSON: found by New at no extra cost, so comparing
// two versions of an object around it does not parse either again. ok is
// false when New could not place it (absent, not a plain string, or an
// Object New did not build).
func (o *Object) ResourceVersionSpan() (start, end int, ok bool) {
	if o.rvEnd == 0 {
		return 0, 0, false
	}
	return o.rvEnd - len(o.resourceVersion) - 2, o.rvEnd, true
}

// ChangedBy returns the newest managedFields entry, if the object had one.
func (o *Object) ChangedBy() (ChangedBy, bool) { return o.changedBy, o.hasChangedBy }

// metadata returns the metadata member, aliasing JSON. It is for the rare
// lazy getters; the hot fields are parsed once in New.
func (o *Object) metadata() gjson.Result {
	return gjson.Get(unsafe.String(unsafe.SliceData(o.JSON), len(o.JSON)), "metadata")
}

// Get returns the value at a gjson path of the object, for the cold paths
// (reference payloads, keyBy). Strings in the result alias JSON.
func (o *Object) Get(path string) gjson.Result {
	return gjson.Get(unsafe.String(unsafe.SliceData(o.JSON), len(o.JSON)), path)
}

func stringMap(r gjson.Result) map[string]string {
	if !r.IsObject() {
		return nil
	}
	m := map[string]string{}
	r.ForEach(func(k, v gjson.Result) bool {
		// Copy: the maps escape to callers that may keep them longer than
		// they think about the Object.
		m[string([]byte(k.String()))] = string([]byte(v.String()))
		return true
	})
	return m
}

func (o *Object) GetNamespace() string         { return o.namespace }
func (o *Object) GetName() string              { return o.name }
func (o *Object) GetUID() types.UID            { return types.UID(o.uid) }
func (o *Object) GetResourceVersion() string   { return o.resourceVersion }
func (o *Object) GetGeneration() int64         { return o.generation }
func (o *Object) GetGenerateName() string      { return o.metadata().Get("generateName").String() }
func (o *Object) GetSelfLink() string          { return o.metadata().Get("selfLink").String() }
func (o *Object) GetLabels() map[string]string { return stringMap(o.metadata().Get("labels")) }
func (o *Object) GetAnnotations() map[string]string {
	return stringMap(o.metadata().Get("annotations"))
}

func (o *Object) GetCreationTimestamp() metav1.Time {
	t, _ := time.Parse(time.RFC3339, o.metadata().Get("creationTimestamp").String())
	return metav1.Time{Time: t}
}

func (o *Object) GetDeletionTimestamp() *metav1.Time {
	r := o.metadata().Get("deletionTimestamp")
	if r.Type != gjson.String {
		return nil
	}
	t, err := time.Parse(time.RFC3339, r.Str)
	if err != nil {
		return nil
	}
	return &metav1.Time{Time: t}
}

func (o *Object) GetDeletionGracePeriodSeconds() *int64 {
	r := o.metadata().Get("deletionGracePeriodSeconds")
	if r.Type != gjson.Number {
		return nil
	}
	v := r.Int()
	return &v
}

func (o *Object) GetFinalizers() []string {
	var out []string
	o.metadata().Get("finalizers").ForEach(func(_, v gjson.Result) bool {
		out = append(out, string([]byte(v.String())))
		return true
	})
	return out
}

// GetOwnerReferences is unused by kubewire; the raw path does not decode them.
func (o *Object) GetOwnerReferences() []metav1.OwnerReference { return nil }

// GetManagedFields returns nil: managedFields are cut, or kept only as bytes.
func (o *Object) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }

// The setters are no-ops: an Object is immutable (see the type's comment).
func (o *Object) SetNamespace(string)                          {}
func (o *Object) SetName(string)                               {}
func (o *Object) SetGenerateName(string)                       {}
func (o *Object) SetUID(types.UID)                             {}
func (o *Object) SetResourceVersion(string)                    {}
func (o *Object) SetGeneration(int64)                          {}
func (o *Object) SetSelfLink(string)                           {}
func (o *Object) SetCreationTimestamp(metav1.Time)             {}
func (o *Object) SetDeletionTimestamp(*metav1.Time)            {}
func (o *Object) SetDeletionGracePeriodSeconds(*int64)         {}
func (o *Object) SetLabels(map[string]string)                  {}
func (o *Object) SetAnnotations(map[string]string)             {}
func (o *Object) SetFinalizers([]string)                       {}
func (o *Object) SetOwnerReferences([]metav1.OwnerReference)   {}
func (o *Object) SetManagedFields([]metav1.ManagedFieldsEntry) {}
