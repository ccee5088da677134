package informer

import (
	"bytes"
	"fmt"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/internal/metrics"
	"github.com/kubewire/kubewire/internal/shape"
)

// The raw path (cache: raw) mirrors addChange/updateChange/deleteChange and the
// shaper for *raw.Object. It decodes an object only for the shaping that
// needs its content (a filter, ignorePaths); a resource without those pays
// no decode at all.

// newRawInformer is newInformer for cache: raw: the same SharedIndexInformer,
// fed by a ListerWatcher that yields raw Objects. No transform: the raw
// ListerWatcher already cut managedFields while copying the bytes.
func (w *Watcher) newRawInformer() (cache.SharedIndexInformer, error) {
	if w.opt.REST == nil {
		return nil, fmt.Errorf("cache %q needs Options.REST", config.CacheRaw)
	}
	rules, err := w.cfg.RedactRules()
	if err != nil {
		return nil, err
	}
	var rewrite func(map[string]any)
	if len(rules) > 0 {
		rewrite = func(m map[string]any) { shape.Redact(m, rules) }
	}
	lw := func(ns string, keep func(string) bool) *cache.ListWatch {
		return raw.NewListWatch(raw.ListWatchOptions{
			Client:    w.opt.REST,
			GVR:       w.gvr,
			Namespace: ns,
			Tweak: func(o *metav1.ListOptions) {
				o.LabelSelector = w.cfg.LabelSelector
				o.FieldSelector = w.cfg.FieldSelector
			},
			Keep:              keep,
			KeepManagedFields: w.cfg.KeepManagedFields,
			Rewrite:           rewrite,
		})
	}
	inf := cache.NewSharedIndexInformerWithOptions(w.listerWatcher(lw, w.opt.REST), &raw.Object{},
		cache.SharedIndexInformerOptions{ObjectDescription: w.gvr.String()})
	_ = inf.SetWatchErrorHandlerWithContext(w.watchError)
	return inf, nil
}

func (w *Watcher) changeRaw(op Op, o *raw.Object, now time.Time, snapshotID string) *Change {
	w.observe(op, now)
	return &Change{
		Op:         op,
		Resource:   w.res,
		Key:        w.shape.keyRaw(w.res, o),
		Raw:        o,
		SnapshotID: snapshotID,
		Observed:   now,
	}
}

func (w *Watcher) addChangeRaw(o *raw.Object, initial bool) *Change {
	if initial && w.initialID != "" {
		if !w.shape.keepRaw(OpSynced, o, nil) {
			return nil
		}
		w.initialCount.Add(1)
		return w.changeRaw(OpSynced, o, time.Now(), w.initialID)
	}
	if initial || !w.cfg.Emits(config.OpAdded) || !w.shape.keepRaw(OpAdded, o, nil) {
		return nil
	}
	return w.changeRaw(OpAdded, o, time.Now(), "")
}

func (w *Watcher) updateChangeRaw(o, n *raw.Object) *Change {
	if o.GetResourceVersion() == n.GetResourceVersion() || !w.cfg.Emits(config.OpUpdated) ||
		!w.shape.keepRaw(OpUpdated, n, o) {
		return nil
	}
	c := w.changeRaw(OpUpdated, n, time.Now(), "")
	c.OldRaw = o
	return c
}

func (w *Watcher) deleteChangeRaw(o *raw.Object, unknown bool) *Change {
	if !w.cfg.Emits(config.OpDeleted) || !w.shape.keepRaw(OpDeleted, o, nil) {
		return nil
	}
	c := w.changeRaw(OpDeleted, o, time.Now(), "")
	c.FinalStateUnknown = unknown
	return c
}

// keepRaw is keep for raw objects. Suppression without ignorePaths works on
// the bytes; a filter or ignorePaths decodes the objects, and only then.
func (s *shaper) keepRaw(op Op, obj, old *raw.Object) bool {
	if s == nil {
		return true
	}
	var objMap, oldMap map[string]any
	if op == OpUpdated && s.suppress != nil {
		var reason string
		var ok bool
		switch {
		case s.updates == shape.UpdatesGenerationChanged:
			reason, ok = shape.ReasonGeneration, old.GetGeneration() == obj.GetGeneration()
		case !s.ignorePaths:
			reason, ok = shape.ReasonUnchanged, sameExceptResourceVersion(old.JSON, obj.JSON)
		default:
			objMap, oldMap = s.decode(obj), s.decode(old)
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
		objMap = s.decode(obj)
	}
	if old != nil && oldMap == nil {
		oldMap = s.decode(old)
	}
	return s.match(op, objMap, oldMap, obj.GetNamespace(), obj.GetName())
}

// decode turns a raw object into the maps shaping works on, with integers
// as int64 like the unstructured cache holds them, so a filter or
// ignorePaths sees the same values on either path.
func (s *shaper) decode(o *raw.Object) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(o.JSON, &m); err != nil {
		// The bytes came through a JSON decoder; this cannot happen short
		// of a bug, and an empty object keeps the event (filters fail open).
		s.log.Error("raw object does not decode", "err", err)
	}
	return m
}

// sameExceptResourceVersion reports whether two objects' bytes differ only
// in metadata.resourceVersion. The apiserver writes an object's JSON
// deterministically, so equal content means equal bytes; a false
// "different" would only emit an update that the unstructured path
// suppresses, never lose one.
func sameExceptResourceVersion(a, b []byte) bool {
	if len(a)-len(b) > 32 || len(b)-len(a) > 32 {
		return false
	}
	ia, ja := rvSpan(a)
	ib, jb := rvSpan(b)
	return bytes.Equal(a[:ia], b[:ib]) && bytes.Equal(a[ja:], b[jb:])
}

func rvSpan(b []byte) (int, int) {
	r := gjson.Get(unsafeString(b), "metadata.resourceVersion")
	if !r.Exists() {
		return len(b), len(b)
	}
	return r.Index, r.Index + len(r.Raw)
}

// keyRaw is key for raw objects.
func (s *shaper) keyRaw(r *Resource, o *raw.Object) string {
	if s != nil && s.involved != "" {
		ref := o.Get(s.involved)
		m := map[string]any{}
		ref.ForEach(func(k, v gjson.Result) bool {
			if v.Type == gjson.String {
				m[k.Str] = v.Str
			}
			return true
		})
		if k, ok := shape.InvolvedKey(map[string]any{s.involved: m}, s.involved); ok {
			return r.KeyPrefix + "/" + k
		}
	}
	return r.ObjectKey(o.GetNamespace(), o.GetName())
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
