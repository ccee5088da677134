package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Cache modes: how a resource's informer holds its objects.
const (
	// CacheUnstructured decodes every object into unstructured maps, as a
	// client-go dynamic informer does. It is the default for now.
	CacheUnstructured = "unstructured"
	// CacheRaw keeps each object's JSON as the apiserver served it (minus
	// managedFields) and publishes those bytes without re-encoding them.
	// Shaping that needs the content (filter, ignorePaths) decodes an
	// object only when it runs.
	CacheRaw = "raw"
)

// CacheModes lists the cache modes.
func CacheModes() []string { return []string{CacheUnstructured, CacheRaw} }

// RawCache reports whether the resource uses the raw cache. "" is the
// default, unstructured.
func (r Resource) RawCache() bool { return r.Cache == CacheRaw }

// validateCache checks the cache mode and refuses raw where the raw path
// does not implement what the resource asks for.
func validateCache(p *field.Path, r *Resource) field.ErrorList {
	cp := p.Child("cache")
	switch r.Cache {
	case "", CacheUnstructured:
		return nil
	case CacheRaw:
	default:
		return field.ErrorList{field.NotSupported(cp, r.Cache, CacheModes())}
	}
	// Redaction must rewrite the object before it is cached, so that secret
	// values never sit in memory; the raw path does not rewrite bytes yet.
	var errs field.ErrorList
	if len(r.Redact) > 0 {
		errs = append(errs, field.Forbidden(cp,
			fmt.Sprintf("cache %q does not support redact yet; remove redact or use cache %q", CacheRaw, CacheUnstructured)))
	}
	if r.IsSecrets() && !r.AllowSecretData {
		errs = append(errs, field.Forbidden(cp,
			fmt.Sprintf("cache %q cannot apply the built-in redaction of Secrets yet; use cache %q (or allowSecretData: true, which publishes Secret values)",
				CacheRaw, CacheUnstructured)))
	}
	return errs
}
