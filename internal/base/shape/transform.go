package shape

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// NewTransform returns the function an informer runs on every object before
// caching it, or nil when there is nothing to do. Redacting here, rather than
// when encoding, means secret values never sit in kubewire's cache, so no
// snapshot, diff or log line can reach them.
//
// The function is idempotent: client-go may hand it an object it has already
// transformed.
func NewTransform(stripManagedFields bool, rules []Rule) func(any) (any, error) {
	if !stripManagedFields && len(rules) == 0 {
		return nil
	}
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		if stripManagedFields {
			// Provenance first: it is read from the managedFields about to go.
			recordChangedBy(u.Object)
			unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
		}
		Redact(u.Object, rules)
		return u, nil
	}
}
