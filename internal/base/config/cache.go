package config

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Cache modes: how a resource's informer holds its objects.
const (
	// CacheUnstructured decodes every object into unstructured maps, as a
	// client-go dynamic informer does.
	CacheUnstructured = "unstructured"
	// CacheRaw (the default) keeps each object's JSON as the apiserver
	// served it (minus managedFields) and publishes those bytes without
	// re-encoding them.
	// Shaping that needs the content (filter, ignorePaths) decodes an
	// object only when it runs.
	CacheRaw = "raw"
)

// CacheModes lists the cache modes.
func CacheModes() []string { return []string{CacheUnstructured, CacheRaw} }

// RawCache reports whether the resource uses the raw cache. "" is the
// default, raw.
func (r Resource) RawCache() bool { return r.Cache != CacheUnstructured }

// validateCache checks the cache mode.
func validateCache(p *field.Path, r *Resource) field.ErrorList {
	cp := p.Child("cache")
	switch r.Cache {
	case "", CacheUnstructured:
		return nil
	case CacheRaw:
	default:
		return field.ErrorList{field.NotSupported(cp, r.Cache, CacheModes())}
	}
	return nil
}
