package informer

import (
	"log/slog"
	"sync/atomic"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/shape"
)

// shaper runs a resource's shaping steps in the listener (internal/base/shape
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
	// updates and ignorePaths let keep pick the comparison an Object can
	// make without decoding when the update mode allows it.
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
// changed" is the better reason to report. The comparison is picked by
// mode so that the object answers what it can without decoding: the
// generation, or "unchanged but for the resourceVersion" (bytes on the raw
// cache). Only a filter or ignorePaths needs the content, and then only
// once per object.
func (s *shaper) keep(op Op, obj, old Object) bool {
	if s == nil {
		return true
	}
	var objMap, oldMap map[string]any
	if op == OpUpdated && s.suppress != nil {
		var reason string
		var ok bool
		switch {
		case s.updates == shape.UpdatesGenerationChanged:
			reason, ok = shape.ReasonGeneration, old.generation() == obj.generation()
		case !s.ignorePaths:
			reason, ok = shape.ReasonUnchanged, obj.unchangedSince(old)
		default:
			objMap, oldMap = s.content(obj), s.content(old)
			reason, ok = s.suppress.Suppress(oldMap, objMap)
		}
		if ok {
			metrics.UpdatesSuppressed.WithLabelValues(s.name, reason).Inc()
			return false
		}
	}
	if s.filter == nil {
		return true
	}
	if objMap == nil {
		objMap = s.content(obj)
	}
	if old != nil && oldMap == nil {
		oldMap = s.content(old)
	}
	return s.match(op, objMap, oldMap, obj.GetNamespace(), obj.GetName())
}

// content is o's content for shaping. A raw object that does not decode
// cannot happen short of a bug (its bytes came through a JSON decoder); it
// is logged, and the nil map keeps the event, as filters fail open.
func (s *shaper) content(o Object) map[string]any {
	m, err := o.content()
	if err != nil {
		s.log.Error("raw object does not decode", "err", err)
	}
	return m
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

// key is the partition key of o: its own, or that of the object an Event
// is about.
func (s *shaper) key(r *Resource, o Object) string {
	if s != nil && s.involved != "" {
		if k, ok := shape.ReferenceKey(o.reference(s.involved)); ok {
			return r.KeyPrefix + "/" + k
		}
	}
	return o.key(r.KeyPrefix)
}

// transformFunc is the informer's transform: the shaper's, or for a Watcher
// run without one (tests) plain managedFields stripping.
func (s *shaper) transformFunc() func(any) (any, error) {
	if s == nil {
		return stripManagedFields
	}
	return s.transform
}
