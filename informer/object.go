package informer

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/informer/raw"
)

// Object is one object of a resource's cache as the pipeline reads it: the
// handlers, shaping, snapshots and encoding. The two caches hold different
// Go types, *raw.Object (the default) and *unstructured.Unstructured;
// objectOf wraps either into an Object where client-go hands it over, and
// nothing after that point asks which cache it came from. Each cache
// answers in its own way what it can answer cheaply: the raw cache compares
// and publishes bytes without decoding them, the unstructured cache already
// holds the maps.
//
// An Object is immutable: the cache, the handler's last-seen view and every
// sink share it. Only this package's types are Objects.
type Object interface {
	GetNamespace() string
	GetName() string
	GetUID() types.UID
	GetResourceVersion() string
	GetAPIVersion() string
	GetKind() string
	// ChangedBy is the newest entry of the object's managedFields, read
	// before they were stripped.
	ChangedBy() (raw.ChangedBy, bool)
	// Data is the object's JSON for an event, without kubewire's private
	// key. The raw cache returns its bytes, shared with every sink: they
	// must not be modified. The unstructured cache encodes on every call.
	Data() ([]byte, error)
	// Size is the byte size of Data where it is known without encoding
	// (the raw cache), else 0.
	Size() int64

	// generation is metadata.generation, 0 if there is none.
	generation() int64
	// content is the object decoded into the maps shaping works on (filters,
	// ignorePaths), integers as int64. The raw cache decodes on every call;
	// the unstructured cache returns its own maps, which must not be
	// modified.
	content() (map[string]any, error)
	// unchangedSince reports whether the object differs from old, an
	// earlier state of it from the same cache, in nothing but what every
	// update mode disregards (shape.Unchanged).
	unchangedSince(old Object) bool
	// key is the object's partition key within the resource whose
	// KeyPrefix is prefix: Resource.ObjectKey of its namespace and name.
	key(prefix string) string
	// reference is the object reference held in the top-level field name
	// (an Event's involvedObject or regarding), nil if there is none. Only
	// its string members are sure to be there.
	reference(name string) map[string]any
}

var (
	_ Object = rawObject{}
	_ Object = unstructuredObject{}
)

// objectOf is where the two caches meet: client-go hands the handlers
// objects of the cache's own type, and from here on they are Objects. The
// wrappers hold just the pointer, so wrapping does not allocate. It reports
// false for anything else.
func objectOf(obj any) (Object, bool) {
	switch o := obj.(type) {
	case *raw.Object:
		return rawObject{o}, true
	case *unstructured.Unstructured:
		return unstructuredObject{o}, true
	}
	return nil, false
}

// FromRaw returns the Object of a raw-cache object, or nil for nil. It is
// for building Changes outside the informer, in tests and tools.
func FromRaw(o *raw.Object) Object {
	if o == nil {
		return nil
	}
	return rawObject{o}
}

// FromUnstructured returns the Object of an unstructured-cache object, or
// nil for nil. u must already be transformed as the informer's transform
// would leave it, and must not be modified afterwards.
func FromUnstructured(u *unstructured.Unstructured) Object {
	if u == nil {
		return nil
	}
	return unstructuredObject{u}
}
