package consumer

import (
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// Lookup returns what the view holds for a partition key, undecoded.
func (v *View) Lookup(key string) (Object, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.objects[key]
	if !ok {
		return Object{}, false
	}
	return e.Object, true
}

// Get returns the object at a partition key, decoded.
func (v *View) Get(key string) (*unstructured.Unstructured, bool, error) {
	o, ok := v.Lookup(key)
	if !ok {
		return nil, false, nil
	}
	u, err := o.Decode()
	return u, err == nil, err
}

// Len returns the number of objects held.
func (v *View) Len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.objects)
}

// Objects returns the objects held whose resource is resource (every
// object for ""), undecoded and sorted by key.
func (v *View) Objects(resource string) []Object {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out, _ := v.objectsLocked(resource)
	return out
}

func (v *View) objectsLocked(resource string) ([]Object, Positions) {
	out := make([]Object, 0, len(v.objects))
	for k, e := range v.objects {
		if resource == "" || resourceOf(k) == resource {
			out = append(out, e.Object)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, v.positionLocked()
}

// List returns every object held, decoded, sorted by key.
func (v *View) List() ([]*unstructured.Unstructured, error) {
	return decodeAll(v.Objects(""), func(Object) bool { return true })
}

// ByNamespace returns the objects of a namespace ("" for cluster-scoped
// objects), decoded, sorted by key. It reads the namespace index, so its
// cost follows the namespace's size, not the view's.
func (v *View) ByNamespace(namespace string) ([]*unstructured.Unstructured, error) {
	v.mu.RLock()
	os := make([]Object, 0, len(v.byNamespace[namespace]))
	for _, e := range v.byNamespace[namespace] {
		os = append(os, e.Object)
	}
	v.mu.RUnlock()
	sort.Slice(os, func(i, j int) bool { return os[i].Key < os[j].Key })
	return decodeAll(os, func(Object) bool { return true })
}

// ByLabel returns the objects whose labels match sel, decoded, sorted by
// key. Labels are read from each object's JSON: the view keeps no label
// index, to stay close to the size of the objects.
func (v *View) ByLabel(sel labels.Selector) ([]*unstructured.Unstructured, error) {
	return decodeAll(v.Objects(""), func(o Object) bool { return sel.Matches(o.Labels()) })
}

func decodeAll(os []Object, keep func(Object) bool) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, o := range os {
		if !keep(o) {
			continue
		}
		u, err := o.Decode()
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}
