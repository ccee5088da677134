package informer

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/shape"
)

// unstructuredObject is an Object of the unstructured cache (cache:
// unstructured): the decoded maps the dynamic client returns, after the
// informer's transform.
type unstructuredObject struct{ *unstructured.Unstructured }

// ChangedBy reads the provenance the transform kept under kubewire's
// private key, or the newest managedFields entry where they are kept.
func (o unstructuredObject) ChangedBy() (raw.ChangedBy, bool) {
	cb, ok := shape.ChangedByOf(o.Object)
	return raw.ChangedBy{Manager: cb.Manager, Operation: cb.Operation, Time: cb.Time}, ok
}

func (o unstructuredObject) Data() ([]byte, error) { return shape.Marshal(o.Object) }

// Size is 0: the size is only known by encoding, which the dispatcher's
// byte limit does not pay for.
func (o unstructuredObject) Size() int64 { return 0 }

func (o unstructuredObject) generation() int64 { return shape.Generation(o.Object) }

func (o unstructuredObject) content() (map[string]any, error) { return o.Object, nil }

func (o unstructuredObject) unchangedSince(old Object) bool {
	prev, ok := old.(unstructuredObject)
	return ok && shape.Unchanged(prev.Object, o.Object)
}

func (o unstructuredObject) key(prefix string) string {
	return objectKey(prefix, o.GetNamespace(), o.GetName())
}

func (o unstructuredObject) reference(name string) map[string]any {
	ref, _ := o.Object[name].(map[string]any)
	return ref
}
