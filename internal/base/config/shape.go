package config

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubewire/kubewire/internal/base/shape"
)

// RedactRule names fields of a resource's objects to hide before they are
// cached: Mode "digest" (the default) replaces each value by
// "sha256:<hex>", "remove" deletes it.
type RedactRule struct {
	// Path uses the syntax of shape.Path, e.g. "data['password']".
	Path string `json:"path"`
	Mode string `json:"mode,omitempty"`
}

// IsSecrets reports whether the resource is core/v1 Secrets, which are
// redacted by default.
func (r Resource) IsSecrets() bool { return r.Group == "" && r.Resource == "secrets" }

// RedactRules returns the redaction the informer applies: the built-in
// Secret rules (unless allowSecretData), then the configured ones. The
// config must have been validated.
func (r Resource) RedactRules() ([]shape.Rule, error) {
	var rules []shape.Rule
	if r.IsSecrets() && !r.AllowSecretData {
		rules = shape.SecretRules()
	}
	for i, rr := range r.Redact {
		p, err := shape.ParsePath(rr.Path)
		if err != nil {
			return nil, fmt.Errorf("redact[%d].path %q: %w", i, rr.Path, err)
		}
		mode := rr.Mode
		if mode == "" {
			mode = shape.RedactDigest
		}
		rules = append(rules, shape.Rule{Path: p, Mode: mode})
	}
	return rules, nil
}

// IgnoredPaths returns the parsed ignorePaths. The config must have been
// validated.
func (r Resource) IgnoredPaths() ([]shape.Path, error) {
	var ps []shape.Path
	for i, s := range r.IgnorePaths {
		p, err := shape.ParsePath(s)
		if err != nil {
			return nil, fmt.Errorf("ignorePaths[%d] %q: %w", i, s, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Warnings lists settings that are valid but risky. `kubewire validate`
// prints them and `kubewire run` logs them.
func (c *Config) Warnings() []string {
	var ws []string
	for i, r := range c.Resources {
		if r.IsSecrets() && r.AllowSecretData {
			ws = append(ws, fmt.Sprintf("resources[%d].allowSecretData: true: Secret values (data, stringData and the %s annotation) are sent to sinks %v unredacted; anyone who can read those topics or subjects can read the Secrets",
				i, shape.LastAppliedAnnotation, r.Sinks))
		}
	}
	for i, r := range c.Resources {
		if w := clusterRoleWarning(r); w != "" {
			ws = append(ws, fmt.Sprintf("resources[%d]: %s", i, w))
		}
	}
	for i := range c.Sinks {
		s := &c.Sinks[i]
		if w, ok := s.Block.(interface{ Warnings(*field.Path) []string }); ok {
			ws = append(ws, w.Warnings(field.NewPath("sinks").Index(i).Child(s.Type))...)
		}
	}
	return ws
}

// clusterRoleWarning says when a resource's watch needs a ClusterRole that
// grants more than the config asks for: several namespaces read through one
// cluster-wide watch, or every Secret in the cluster. A cluster-wide watch of
// anything else is what the config says, so it is not warned about.
func clusterRoleWarning(r Resource) string {
	name := r.Resource
	if r.Group != "" {
		name += "." + r.Group
	}
	switch {
	case len(r.Namespaces) > 1 && !r.PerNamespaceWatch():
		return fmt.Sprintf("namespaces %v are read through one cluster-wide watch, which needs a ClusterRole: kubewire may then read %s in every namespace; set watchPerNamespace: true for one watch and one Role per namespace", r.Namespaces, name)
	case r.IsSecrets() && r.AllNamespaces():
		return "secrets in all namespaces need a ClusterRole that reads every Secret in the cluster; list the namespaces kubewire needs"
	}
	return ""
}

// applyShapeDefaults fills in the shaping fields of a resource.
func applyShapeDefaults(r *Resource) {
	if r.Updates == "" {
		r.Updates = shape.UpdatesChanged
	}
	if r.Payload == "" {
		r.Payload = shape.PayloadFull
	}
	if r.KeyBy == "" {
		r.KeyBy = shape.KeyByObject
	}
	for i := range r.Redact {
		if r.Redact[i].Mode == "" {
			r.Redact[i].Mode = shape.RedactDigest
		}
	}
}

// validateShape checks the shaping fields of one resource. Every field is
// optional, so the empty string counts as its default.
func validateShape(p *field.Path, r *Resource) field.ErrorList {
	var errs field.ErrorList

	if r.Filter != "" {
		if _, err := shape.CompileFilter(r.Filter); err != nil {
			var fe *shape.FilterError
			detail := err.Error()
			if errors.As(err, &fe) {
				detail = "must be a CEL expression over object, oldObject and type that yields a bool: " + fe.Error()
			}
			errs = append(errs, field.Invalid(p.Child("filter"), r.Filter, detail))
		}
	}

	if r.Updates != "" && !slices.Contains(shape.UpdateModes(), r.Updates) {
		errs = append(errs, field.NotSupported(p.Child("updates"), r.Updates, shape.UpdateModes()))
	}
	ip := p.Child("ignorePaths")
	if len(r.IgnorePaths) > 0 && r.Updates != "" && r.Updates != shape.UpdatesChanged {
		errs = append(errs, field.Forbidden(ip, fmt.Sprintf(
			"only applies with updates %q (updates is %q, which does not compare content)", shape.UpdatesChanged, r.Updates)))
	}
	for j, s := range r.IgnorePaths {
		errs = append(errs, validatePath(ip.Index(j), s, r.IgnorePaths[:j])...)
	}

	rp := p.Child("redact")
	var seen []string
	for j, rr := range r.Redact {
		jp := rp.Index(j)
		errs = append(errs, validatePath(jp.Child("path"), rr.Path, seen)...)
		seen = append(seen, rr.Path)
		if rr.Mode != "" && !slices.Contains(shape.RedactModes(), rr.Mode) {
			errs = append(errs, field.NotSupported(jp.Child("mode"), rr.Mode, shape.RedactModes()))
		}
	}
	if r.AllowSecretData && !r.IsSecrets() {
		errs = append(errs, field.Forbidden(p.Child("allowSecretData"),
			`only applies to core/v1 secrets (group "" and resource "secrets"), the only resource redacted by default`))
	}

	if r.Payload != "" && !slices.Contains(shape.PayloadModes(), r.Payload) {
		errs = append(errs, field.NotSupported(p.Child("payload"), r.Payload, shape.PayloadModes()))
	}

	kp := p.Child("keyBy")
	switch {
	case r.KeyBy == "" || r.KeyBy == shape.KeyByObject:
	case !slices.Contains(shape.KeyByModes(), r.KeyBy):
		errs = append(errs, field.NotSupported(kp, r.KeyBy, shape.KeyByModes()))
	case r.IsDiscover():
		// Applies to the Events the entry discovers (Resource.For).
	default:
		if _, ok := shape.EventsResource(r.Group, r.Resource); !ok {
			errs = append(errs, field.Invalid(kp, r.KeyBy,
				`only applies to Events: group "" or "events.k8s.io" with resource "events"`))
		}
	}
	return errs
}

// validatePath checks one path and that it is not listed twice.
func validatePath(p *field.Path, s string, before []string) field.ErrorList {
	if s == "" {
		return field.ErrorList{field.Required(p, `a field path such as "status.conditions[*].lastHeartbeatTime" or "metadata.annotations['example.com/x']"`)}
	}
	if slices.Contains(before, s) {
		return field.ErrorList{field.Duplicate(p, s)}
	}
	if _, err := shape.ParsePath(s); err != nil {
		return field.ErrorList{field.Invalid(p, s,
			`must be a path of names, ['quoted keys'] and [*], such as "status.conditions[*].lastHeartbeatTime": `+err.Error())}
	}
	return nil
}
