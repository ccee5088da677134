package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validate checks c and returns a *Error listing every problem, or nil.
// It does not apply defaults: call ApplyDefaults first for a configuration
// built in code (Load and Parse do both).
//
// Without the registry of sink types it cannot check that a sink's type
// exists; it checks each sink's Block where one is set.
func (c *Config) Validate() error {
	if errs := validate(c, nil, nil); len(errs) > 0 {
		return &Error{Errors: errs}
	}
	return nil
}

// validate checks c. types may be nil (a configuration built in code), and
// given holds the paths present in the file (nil for one built in code).
func validate(c *Config, types SinkTypes, given map[string]bool) field.ErrorList {
	var errs field.ErrorList

	errs = append(errs, validateConstant(field.NewPath("apiVersion"), c.APIVersion, APIVersion)...)
	errs = append(errs, validateConstant(field.NewPath("kind"), c.Kind, Kind)...)

	clusterPath := field.NewPath("cluster")
	if c.Cluster == "" {
		errs = append(errs, field.Required(clusterPath,
			"a DNS-1123 label (lowercase letters, digits and '-') naming the cluster; it appears in CloudEvent sources and NATS subjects"))
	} else {
		errs = append(errs, validateLabel(clusterPath, c.Cluster)...)
	}

	errs = append(errs, validateClient(field.NewPath("client"), &c.Client)...)
	errs = append(errs, validateDispatch(field.NewPath("dispatch"), &c.Dispatch)...)

	sinkNames, sinkErrs := validateSinks(field.NewPath("sinks"), c.Sinks, types)
	errs = append(errs, validateResources(field.NewPath("resources"), c.Resources, sinkNames)...)
	errs = append(errs, sinkErrs...)
	for i := range c.Sinks {
		errs = append(errs, validateSinkBlock(c, i, given)...)
	}
	return errs
}

func validateConstant(p *field.Path, got, want string) field.ErrorList {
	switch got {
	case want:
		return nil
	case "":
		return field.ErrorList{field.Required(p, fmt.Sprintf("must be %q", want))}
	default:
		return field.ErrorList{field.NotSupported(p, got, []string{want})}
	}
}

func validateLabel(p *field.Path, v string) field.ErrorList {
	if msgs := validation.IsDNS1123Label(v); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, v, strings.Join(msgs, "; "))}
	}
	return nil
}

func validateClient(p *field.Path, c *ClientConfig) field.ErrorList {
	var errs field.ErrorList
	if !(c.QPS > 0) {
		errs = append(errs, field.Invalid(p.Child("qps"), c.QPS, "must be greater than 0"))
	}
	if float64(c.Burst) < float64(c.QPS) {
		errs = append(errs, field.Invalid(p.Child("burst"), c.Burst,
			fmt.Sprintf("must be greater than or equal to qps (%v)", c.QPS)))
	}
	return errs
}

func validateDispatch(p *field.Path, d *DispatchConfig) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateRange(p.Child("shards"), d.Shards, 1, MaxShards)...)
	if d.BufferEvents <= 0 {
		errs = append(errs, field.Invalid(p.Child("bufferEvents"), d.BufferEvents, "must be greater than 0"))
	}
	if d.BufferBytes < 0 {
		errs = append(errs, field.Invalid(p.Child("bufferBytes"), d.BufferBytes, "must be 0 (no byte limit) or greater"))
	}
	errs = append(errs, validateRange(p.Child("batchSize"), d.BatchSize, 1, MaxBatchSize)...)
	dp := p.Child("drainTimeout")
	if bad := validateDurationSyntax(dp, d.DrainTimeout); bad != nil {
		errs = append(errs, bad)
	} else if d.DrainTimeout.Duration <= 0 {
		errs = append(errs, field.Invalid(dp, d.DrainTimeout.String(), "must be greater than 0"))
	}
	return errs
}

var (
	overflowPolicies = []string{OverflowSpool, OverflowConflate}
	fsyncPolicies    = []string{FsyncAlways, FsyncInterval, FsyncNever}
)

func validateOverflow(p *field.Path, s *Sink) field.ErrorList {
	var errs field.ErrorList
	if !slices.Contains(overflowPolicies, s.Overflow) {
		errs = append(errs, field.NotSupported(p.Child("overflow"), s.Overflow, overflowPolicies))
	}
	sp := p.Child("spool")
	if s.Spool.MaxBytes < MinSpoolBytes {
		errs = append(errs, field.Invalid(sp.Child("maxBytes"), s.Spool.MaxBytes,
			fmt.Sprintf("must be at least %d (4 MiB): a spool must hold a couple of the largest objects the apiserver serves", MinSpoolBytes)))
	}
	if !slices.Contains(fsyncPolicies, s.Spool.Fsync) {
		errs = append(errs, field.NotSupported(sp.Child("fsync"), s.Spool.Fsync, fsyncPolicies))
	}
	return errs
}

func validateRange(p *field.Path, v, lo, hi int) field.ErrorList {
	if v < lo || v > hi {
		return field.ErrorList{field.Invalid(p, v, fmt.Sprintf("must be between %d and %d", lo, hi))}
	}
	return nil
}

// validateDurationSyntax reports a value that could not be read as a
// duration at all.
func validateDurationSyntax(p *field.Path, d Duration) *field.Error {
	if d.invalid == "" {
		return nil
	}
	return field.Invalid(p, d.invalid, d.invalidDetail)
}

// validateSinks validates the sinks and returns the names defined.
func validateSinks(p *field.Path, sinks []Sink, types SinkTypes) ([]string, field.ErrorList) {
	var errs field.ErrorList
	if len(sinks) == 0 {
		errs = append(errs, field.Required(p, "list at least one sink, e.g. {name: out, type: stdout}"))
	}
	var names []string
	for i := range sinks {
		s := &sinks[i]
		sp := p.Index(i)
		np := sp.Child("name")
		switch {
		case s.Name == "":
			errs = append(errs, field.Required(np, "a DNS-1123 label that resources use to refer to this sink"))
		case slices.Contains(names, s.Name):
			errs = append(errs, field.Duplicate(np, s.Name))
		default:
			errs = append(errs, validateLabel(np, s.Name)...)
		}
		if s.Name != "" && !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}

		tp := sp.Child("type")
		switch {
		case s.Type == "" && types != nil:
			errs = append(errs, field.Required(tp, "supported types: "+quoteAll(types.Types())))
		case s.Type == "":
			errs = append(errs, field.Required(tp, "the sink type"))
		case types != nil && !slices.Contains(types.Types(), s.Type):
			errs = append(errs, field.NotSupported(tp, s.Type, types.Types()))
		}
		errs = append(errs, validateOverflow(sp, s)...)
	}
	return names, errs
}

func validateResources(p *field.Path, resources []Resource, sinkNames []string) field.ErrorList {
	var errs field.ErrorList
	if len(resources) == 0 {
		errs = append(errs, field.Required(p, "list at least one resource to watch, e.g. {version: v1, resource: configmaps, sinks: [out]}"))
	}
	seen := map[schema.GroupResource]int{}
	for i := range resources {
		r := &resources[i]
		rp := p.Index(i)
		errs = append(errs, validateResource(rp, r, sinkNames)...)

		if r.Resource == "" || r.IsDiscover() {
			continue
		}
		gr := schema.GroupResource{Group: r.Group, Resource: r.Resource}
		if first, dup := seen[gr]; dup {
			e := field.Duplicate(rp, gr.String())
			e.Detail = fmt.Sprintf("resources[%d] already watches this group and resource; kubewire runs one informer per resource, so merge the two entries", first)
			errs = append(errs, e)
		} else {
			seen[gr] = i
		}
	}
	return errs
}

func validateResource(p *field.Path, r *Resource, sinkNames []string) field.ErrorList {
	var errs field.ErrorList

	if r.IsDiscover() {
		errs = append(errs, validateDiscover(p, r)...)
	} else {
		errs = append(errs, validateNamed(p, r)...)
	}
	return append(errs, validateSettings(p, r, sinkNames)...)
}

// validateNamed checks the group, version and resource of an entry that
// names one resource.
func validateNamed(p *field.Path, r *Resource) field.ErrorList {
	var errs field.ErrorList
	if r.Group != "" {
		if msgs := validation.IsDNS1123Subdomain(r.Group); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("group"), r.Group,
				`must be "" for the core group or a DNS-1123 subdomain such as "apps": `+strings.Join(msgs, "; ")))
		}
	}
	if r.Version == "" {
		errs = append(errs, field.Required(p.Child("version"), `the API version, e.g. "v1"`))
	} else if msgs := validation.IsDNS1123Label(r.Version); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("version"), r.Version,
			`must be an API version such as "v1" or "v1beta1": `+strings.Join(msgs, "; ")))
	}
	if r.Resource == "" {
		errs = append(errs, field.Required(p.Child("resource"), `the lowercase plural resource name, e.g. "configmaps"`))
	} else if msgs := validation.IsDNS1123Subdomain(r.Resource); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("resource"), r.Resource,
			`must be a lowercase plural resource name such as "configmaps": `+strings.Join(msgs, "; ")))
	}
	return errs
}

// validateSettings checks what an entry sets for the resources it selects.
func validateSettings(p *field.Path, r *Resource, sinkNames []string) field.ErrorList {
	var errs field.ErrorList
	for j, ns := range r.Namespaces {
		np := p.Child("namespaces").Index(j)
		switch {
		case ns == "":
			errs = append(errs, field.Required(np, "a namespace name; omit namespaces to watch all namespaces"))
		case slices.Contains(r.Namespaces[:j], ns):
			errs = append(errs, field.Duplicate(np, ns))
		default:
			errs = append(errs, validateLabel(np, ns)...)
		}
	}
	if r.WatchPerNamespace != nil && *r.WatchPerNamespace && len(r.Namespaces) == 0 {
		errs = append(errs, field.Invalid(p.Child("watchPerNamespace"), true,
			"needs a namespaces list: without one kubewire watches all namespaces with one watch"))
	}

	if r.LabelSelector != "" {
		if _, err := labels.Parse(r.LabelSelector); err != nil {
			errs = append(errs, field.Invalid(p.Child("labelSelector"), r.LabelSelector,
				"must be a valid label selector such as \"app=web,tier!=cache\": "+err.Error()))
		}
	}
	if r.FieldSelector != "" {
		if why := fieldSelectorProblem(r.FieldSelector); why != "" {
			errs = append(errs, field.Invalid(p.Child("fieldSelector"), r.FieldSelector,
				"must be a valid field selector such as \"metadata.name!=x\": "+why))
		}
	}

	op := p.Child("operations")
	if r.Operations != nil && len(r.Operations) == 0 {
		errs = append(errs, field.Required(op, "list at least one of "+quoteAll(Operations())+", or omit operations to emit all of them"))
	}
	for j, o := range r.Operations {
		switch {
		case !slices.Contains(Operations(), o):
			errs = append(errs, field.NotSupported(op.Index(j), o, Operations()))
		case slices.Contains(r.Operations[:j], o):
			errs = append(errs, field.Duplicate(op.Index(j), o))
		}
	}

	sp := p.Child("snapshotInterval")
	si := r.SnapshotInterval
	if bad := validateDurationSyntax(sp, si); bad != nil {
		errs = append(errs, bad)
	} else if si.Duration < 0 || (si.Duration > 0 && si.Duration < MinSnapshotInterval) {
		errs = append(errs, field.Invalid(sp, si.String(),
			fmt.Sprintf("must be 0 (no periodic snapshots) or at least %s", MinSnapshotInterval)))
	} else if si.set && si.Duration > 0 && len(r.Operations) > 0 && !r.Emits(OpSynced) {
		errs = append(errs, field.Forbidden(sp,
			"periodic snapshots are sent as synced events, which operations leaves out; add \"synced\" to operations or remove snapshotInterval"))
	}

	errs = append(errs, validateShape(p, r)...)
	errs = append(errs, validateCache(p, r)...)

	kp := p.Child("sinks")
	if len(r.Sinks) == 0 {
		errs = append(errs, field.Required(kp, "name at least one sink from sinks"))
	}
	for j, name := range r.Sinks {
		switch {
		case name == "":
			errs = append(errs, field.Required(kp.Index(j), "the name of a sink from sinks"))
		case slices.Contains(r.Sinks[:j], name):
			errs = append(errs, field.Duplicate(kp.Index(j), name))
		case !slices.Contains(sinkNames, name):
			defined := "none are defined"
			if len(sinkNames) > 0 {
				defined = "defined: " + quoteAll(sinkNames)
			}
			errs = append(errs, field.Invalid(kp.Index(j), name, "must name a sink listed in sinks ("+defined+")"))
		}
	}
	return errs
}

// fieldSelectorProblem returns why s is not a usable field selector, or "".
// fields.ParseSelector accepts a requirement without a field ("=x"), which
// the API server would refuse at watch time; it is caught here instead.
func fieldSelectorProblem(s string) string {
	sel, err := fields.ParseSelector(s)
	if err != nil {
		return err.Error()
	}
	for _, req := range sel.Requirements() {
		if req.Field == "" {
			return fmt.Sprintf("the requirement %q has no field name", string(req.Operator)+req.Value)
		}
	}
	return ""
}

func quoteAll(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}
