package informer

import (
	"log/slog"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/internal/metrics"
	"github.com/kubewire/kubewire/internal/shape"
)

// shaper runs a resource's shaping steps in the listener (internal/shape
// has the steps themselves). Every step that is off is nil, so a resource
// without shaping pays a few nil checks per event and nothing else; a nil
// *shaper is valid and shapes nothing.
type shaper struct {
	name      string
	log       *slog.Logger
	transform func(any) (any, error)
	filter    *shape.Filter
	suppress  *shape.Suppressor
	// involved is the field of an Event naming the object to key by, or "".
	involved string
	// filterLogged makes a failing filter log once, not once per event.
	filterLogged atomic.Bool
	// updates and ignorePaths let the raw path (rawpath.go) pick a byte
	// comparison over decoding when the update mode allows it.
	updates     string
	ignorePaths bool
}

func newShaper(cfg config.Resource, name string, log *slog.Logger) (*shaper, error) {
	rules, err := cfg.RedactRules()
	if err != nil {
		return nil, err
	}
	ignore, err := cfg.IgnoredPaths()
	if err != nil {
		return nil, err
	}
	s := &shaper{name: name, log: log, transform: shape.NewTransform(!cfg.KeepManagedFields, rules)}
	if cfg.Filter != "" {
		if s.filter, err = shape.CompileFilter(cfg.Filter); err != nil {
			return nil, err
		}
	}
	mode := cfg.Updates
	if mode == "" {
		mode = shape.UpdatesChanged
	}
	s.suppress = shape.NewSuppressor(mode, ignore)
	s.updates, s.ignorePaths = mode, len(ignore) > 0
	if cfg.KeyBy == shape.KeyByInvolvedObject {
		s.involved, _ = shape.EventsResource(cfg.Group, cfg.Resource)
	}
	return s, nil
}

// keep reports whether a change of op is emitted. old is set for updates
// only. Suppression runs first: it is cheaper than a filter, and "nothing
// changed" is the better reason to report.
func (s *shaper) keep(op Op, obj, old *unstructured.Unstructured) bool {
	if s == nil {
		return true
	}
	if op == OpUpdated && s.suppress != nil {
		if reason, ok := s.suppress.Suppress(old.Object, obj.Object); ok {
			metrics.UpdatesSuppressed.WithLabelValues(s.name, reason).Inc()
			return false
		}
	}
	if s.filter == nil {
		return true
	}
	var prev map[string]any
	if old != nil {
		prev = old.Object
	}
	return s.match(op, obj.Object, prev, obj.GetNamespace(), obj.GetName())
}

// match runs the filter on the decoded object (and the old one, for
// updates) of namespace/name and counts what it drops.
func (s *shaper) match(op Op, obj, old map[string]any, namespace, name string) bool {
	match, err := s.filter.Match(string(op), obj, old)
	if err != nil {
		// The documented rule: an expression that cannot be evaluated keeps
		// the event. Dropping it would lose data silently on a typo'd key.
		metrics.FilterErrors.WithLabelValues(s.name).Inc()
		if s.filterLogged.CompareAndSwap(false, true) {
			s.log.Warn("filter failed at runtime; keeping the event (logged once per expression, counted in kubewire_filter_errors_total)",
				"filter", s.filter.String(), "type", string(op), "namespace", namespace, "name", name, "err", err)
		}
		return true
	}
	if !match {
		metrics.EventsFiltered.WithLabelValues(s.name, string(op)).Inc()
	}
	return match
}

// key is the partition key of u: its own, or that of the object an Event
// is about.
func (s *shaper) key(r *Resource, u *unstructured.Unstructured) string {
	if s != nil && s.involved != "" {
		if k, ok := shape.InvolvedKey(u.Object, s.involved); ok {
			return r.KeyPrefix + "/" + k
		}
	}
	return r.ObjectKey(u.GetNamespace(), u.GetName())
}

// transformFunc is the informer's transform: the shaper's, or for a Watcher
// run without one (tests) plain managedFields stripping.
func (s *shaper) transformFunc() func(any) (any, error) {
	if s == nil {
		return stripManagedFields
	}
	return s.transform
}
