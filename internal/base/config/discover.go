package config

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubewire/kubewire/internal/base/shape"
)

// Discover makes a resources entry select what the cluster serves instead of
// naming one resource: every resource that supports list and watch, at its
// group's preferred version, whose group and resource match the patterns,
// minus the exclusions. Patterns are path.Match globs ("*", "*.example.com");
// "" is the core group.
type Discover struct {
	// Groups are the group patterns. Default ["*"]: every group, core too.
	Groups []string `json:"groups,omitempty"`
	// Resources are the resource patterns. Default ["*"].
	Resources []string `json:"resources,omitempty"`
	// Exclude removes what any of its entries matches.
	Exclude []Exclusion `json:"exclude,omitempty"`
	// DefaultExclusions applies DefaultExclusions() on top of Exclude.
	// Default true. kubewire's own Leases stay out either way (by name,
	// see the app), and core Secrets are never discovered.
	DefaultExclusions *bool `json:"defaultExclusions,omitempty"`
}

// Exclusion matches the resources whose group matches one of Groups and
// whose resource matches one of Resources; an omitted list matches all.
type Exclusion struct {
	Groups    []string `json:"groups,omitempty"`
	Resources []string `json:"resources,omitempty"`
	// Reason says why, for the default list; it is not read from files.
	Reason string `json:"-"`
}

func (e Exclusion) matches(gr schema.GroupResource) bool {
	return matchAny(e.Groups, gr.Group) && matchAny(e.Resources, gr.Resource)
}

// matchAny reports whether s matches one of the patterns; no patterns match
// everything. Patterns are validated, so a match error cannot occur.
func matchAny(patterns []string, s string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

// DefaultExclusions is what a discover entry leaves out unless it sets
// defaultExclusions: false. An explicit entry for one of these still
// streams it. docs/configuration.md gives the same list and reasons.
func DefaultExclusions() []Exclusion {
	return []Exclusion{
		{Groups: []string{""}, Resources: []string{"endpoints"},
			Reason: "noisy: rewritten on every readiness change of a Pod behind a Service; EndpointSlices carry the same"},
		{Groups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"},
			Reason: "noisy: rewritten on every readiness change of a Pod behind a Service"},
		{Groups: []string{"coordination.k8s.io"}, Resources: []string{"leases", "leasecandidates"},
			Reason: "noisy: every node and every leader election renews one every few seconds"},
		{Groups: []string{""}, Resources: []string{"events"},
			Reason: "ephemeral and high-volume (deleted after an hour), and the same objects as events.k8s.io events: one storage served twice"},
		{Groups: []string{"events.k8s.io"}, Resources: []string{"events"},
			Reason: "ephemeral and high-volume, and the same objects as core events: one storage served twice"},
		{Groups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"},
			Reason: "ephemeral: kubelet certificate rotation creates them and the controller garbage-collects them"},
		{Groups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests"},
			Reason: "ephemeral: one per issuance, kept only as history"},
		{Groups: []string{"cilium.io"}, Resources: []string{"ciliumidentities", "ciliumendpoints", "ciliumendpointslices"},
			Reason: "noisy: Cilium's per-Pod bookkeeping, rewritten as Pods come and go"},
		{Groups: []string{"kyverno.io", "reports.kyverno.io", "wgpolicyk8s.io"},
			Resources: []string{"policyreports", "clusterpolicyreports", "ephemeralreports", "clusterephemeralreports",
				"admissionreports", "clusteradmissionreports", "backgroundscanreports", "clusterbackgroundscanreports", "updaterequests"},
			Reason: "noisy: policy reports rewritten on every admission and background scan"},
	}
}

// IsDiscover reports whether the entry selects by discovery.
func (r Resource) IsDiscover() bool { return r.Discover != nil }

// Selects reports whether the discover entry takes the resource gr. Core
// Secrets are never discovered: they stream only from an entry that names
// them, where they are redacted.
func (d *Discover) Selects(gr schema.GroupResource) bool {
	if gr.Group == "" && gr.Resource == "secrets" {
		return false
	}
	groups, resources := d.Groups, d.Resources
	if len(groups) == 0 {
		groups = []string{"*"}
	}
	if !matchAny(groups, gr.Group) || !matchAny(resources, gr.Resource) {
		return false
	}
	excl := d.Exclude
	if d.DefaultExclusions == nil || *d.DefaultExclusions {
		excl = append(slices.Clone(excl), DefaultExclusions()...)
	}
	return !slices.ContainsFunc(excl, func(e Exclusion) bool { return e.matches(gr) })
}

// Expand returns the resources kubewire watches given what the cluster
// serves at each group's preferred version (served, which should hold only
// resources with list and watch): every explicit entry as written, then one
// entry per served resource that a discover entry selects and no explicit
// entry names. Where two discover entries select a resource, the first
// takes it. An expanded entry is the discover entry's settings with the
// group, version and resource filled in and Discovered set.
func (c *Config) Expand(served []schema.GroupVersionResource) []Resource {
	var out []Resource
	named := map[schema.GroupResource]bool{}
	for _, r := range c.Resources {
		if !r.IsDiscover() {
			out = append(out, r)
			named[r.GVR().GroupResource()] = true
		}
	}
	for _, gvr := range served {
		gr := gvr.GroupResource()
		if named[gr] {
			continue
		}
		for _, r := range c.Resources {
			if !r.IsDiscover() || !r.Discover.Selects(gr) {
				continue
			}
			named[gr] = true
			out = append(out, r.For(gvr))
			break
		}
	}
	return out
}

// For is the discover entry r applied to one discovered resource.
func (r Resource) For(gvr schema.GroupVersionResource) Resource {
	e := r
	e.Discover = nil
	e.Discovered = true
	e.Group, e.Version, e.Resource = gvr.Group, gvr.Version, gvr.Resource
	// keyBy involvedObject is for Events; the entry's other resources are
	// keyed by object.
	if _, ok := shape.EventsResource(gvr.Group, gvr.Resource); !ok && e.KeyBy == shape.KeyByInvolvedObject {
		e.KeyBy = shape.KeyByObject
	}
	return e
}

// DiscoverEntries reports whether any entry selects by discovery.
func (c *Config) DiscoverEntries() bool {
	return slices.ContainsFunc(c.Resources, Resource.IsDiscover)
}

// validateDiscover checks a discover entry: it names no resource itself,
// and its patterns are globs.
func validateDiscover(p *field.Path, r *Resource) field.ErrorList {
	var errs field.ErrorList
	named := "a discover entry selects its resources; name a resource in an entry of its own (which then wins over the discover entry)"
	if r.Group != "" {
		errs = append(errs, field.Invalid(p.Child("group"), r.Group, "must be omitted: "+named))
	}
	if r.Version != "" {
		errs = append(errs, field.Invalid(p.Child("version"), r.Version,
			"must be omitted: a discovered resource streams at its group's preferred version; "+named))
	}
	if r.Resource != "" {
		errs = append(errs, field.Invalid(p.Child("resource"), r.Resource, "must be omitted: "+named))
	}
	if r.Optional {
		errs = append(errs, field.Forbidden(p.Child("optional"),
			"a discover entry streams what the cluster serves; there is nothing to be optional about"))
	}
	dp := p.Child("discover")
	errs = append(errs, validatePatterns(dp.Child("groups"), r.Discover.Groups)...)
	errs = append(errs, validatePatterns(dp.Child("resources"), r.Discover.Resources)...)
	for i, e := range r.Discover.Exclude {
		ep := dp.Child("exclude").Index(i)
		if len(e.Groups) == 0 && len(e.Resources) == 0 {
			errs = append(errs, field.Required(ep,
				`give groups, resources or both, e.g. {groups: ["example.com"], resources: ["widgets"]}; an empty exclusion would exclude everything`))
		}
		errs = append(errs, validatePatterns(ep.Child("groups"), e.Groups)...)
		errs = append(errs, validatePatterns(ep.Child("resources"), e.Resources)...)
	}
	return errs
}

func validatePatterns(p *field.Path, patterns []string) field.ErrorList {
	var errs field.ErrorList
	for i, s := range patterns {
		ip := p.Index(i)
		switch _, err := path.Match(s, ""); {
		case err != nil:
			errs = append(errs, field.Invalid(ip, s, `must be a glob such as "*", "apps" or "*.example.com": `+err.Error()))
		case strings.Contains(s, "/"):
			errs = append(errs, field.Invalid(ip, s, `must be a glob of a group or resource name, without "/"`))
		case slices.Contains(patterns[:i], s):
			errs = append(errs, field.Duplicate(ip, s))
		}
	}
	return errs
}

// VersionPlaceholder is the placeholder a discover entry's topics and
// subjects may not use: the preferred version of a group can change, and
// the stream of its resources must not move when it does.
const VersionPlaceholder = "{version}"

// NoVersionPlaceholder returns the error for a sink template (at p) that
// holds {version} while a discover entry (route) sends to it; nil if the
// template has none or the route is not a discover entry.
func NoVersionPlaceholder(p *field.Path, tmpl string, rt Route) *field.Error {
	if !rt.Resource.IsDiscover() || !strings.Contains(tmpl, VersionPlaceholder) {
		return nil
	}
	return field.Invalid(p, tmpl, fmt.Sprintf(
		"must not use {version}: %s discovers its resources, whose preferred version may change, and their topic or subject must not move when it does; remove {version}",
		rt.Path))
}
