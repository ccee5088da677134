package informer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
)

// The handler contract.
//
// The Watcher's informer (queue.go) calls onAdd, onUpdate and onDelete
// one at a time, in the order the reflector saw the changes, from the
// goroutine that pops its notifyQueue. They keep to what
// client-go's ResourceEventHandler asks, and to what kubewire's ordering
// needs on top:
//
//   - They never block: the change goes to Output.Enqueue, which never
//     blocks either (a full buffer spools or conflates, it does not wait).
//     While a handler is blocked, the queue grows without limit.
//   - They never mutate the object they are given: it is the cache's. A
//     Change keeps the object as it is (the raw cache's bytes are
//     immutable) or a shaped copy.
//   - A delete noticed only by a relist arrives as
//     cache.DeletedFinalStateUnknown; it is unwrapped and marked
//     FinalStateUnknown.
//   - Objects of the initial list (isInInitialList) become synced records
//     of the initial snapshot, not added events.
//   - Recording what the handler last saw of a key and enqueueing its change
//     happen under emitMu, as one step, so that a snapshot reading that
//     record lands in the stream exactly between the changes before and
//     after it (guarantee 3: versions never go backwards).
//   - The drain sentinel (drain.go) is recognised first and ends the drain
//     instead of becoming an event.
//
// Both caches share these handlers: objectOf turns what client-go hands
// over into an Object first.

// observed returns the observed-events counter of op, looked up once per op
// rather than hashed per event.
func (w *Watcher) observed(op Op) prometheus.Counter {
	if c, ok := w.mObserved.Load(op); ok {
		return c.(prometheus.Counter)
	}
	c := metrics.EventsObserved.WithLabelValues(w.name, string(op))
	w.mObserved.Store(op, c)
	return c
}

// observe counts a change of op seen at now and, for a live change (not a
// snapshot record), stamps the resource's last-event time. It is on the
// per-event path: both metrics are cached children, no label hashing.
func (w *Watcher) observe(op Op, now time.Time) {
	w.observed(op).Inc()
	switch op {
	case OpAdded, OpUpdated, OpDeleted:
		w.mLastEvent().Set(float64(now.UnixNano()) / 1e9)
	}
}

func (w *Watcher) change(op Op, o Object, now time.Time, snapshotID string) *Change {
	w.observe(op, now)
	return &Change{
		Op:         op,
		Resource:   w.res,
		Key:        w.shape.key(w.res, o),
		Object:     o,
		SnapshotID: snapshotID,
		Observed:   now,
	}
}

// handled records o as the handler's latest view of its object and
// enqueues c, if the notification emits anything, in one critical section.
// Every notification is recorded, emitted or not: a snapshot lists what
// the cluster holds, whatever the configured operations and filters let
// through as live changes.
func (w *Watcher) handled(o Object, c *Change) {
	w.emitMu.Lock()
	w.seen[nameOf(o)] = o
	w.noteRV(o.GetResourceVersion())
	w.track(o, c)
	if c != nil {
		w.opt.Out.Enqueue(c)
	}
	w.emitMu.Unlock()
}

// gone is handled for a delete: the object leaves the handler's view.
func (w *Watcher) gone(o Object, c *Change) {
	w.emitMu.Lock()
	delete(w.seen, nameOf(o))
	w.noteRV(o.GetResourceVersion())
	w.track(o, c)
	if c != nil {
		w.opt.Out.Enqueue(c)
	}
	w.emitMu.Unlock()
}

func (w *Watcher) onAdd(obj any, initial bool) {
	if w.handleHook != nil {
		w.handleHook()
	}
	if w.isSentinel(obj) {
		return
	}
	if o, ok := objectOf(obj); ok {
		w.handled(o, w.addChange(o, initial))
	}
}

func (w *Watcher) addChange(o Object, initial bool) *Change {
	if initial && w.initialID != "" {
		if !w.shape.keep(OpSynced, o, nil) {
			return nil
		}
		w.initialCount.Add(1)
		return w.change(OpSynced, o, time.Now(), w.initialID)
	}
	if initial || !w.cfg.Emits(config.OpAdded) || !w.shape.keep(OpAdded, o, nil) {
		return nil
	}
	return w.change(OpAdded, o, time.Now(), "")
}

func (w *Watcher) onUpdate(oldObj, newObj any) {
	if w.handleHook != nil {
		w.handleHook()
	}
	if w.isSentinel(newObj) {
		return
	}
	n, ok := objectOf(newObj)
	if !ok {
		return
	}
	var c *Change
	if o, ok := objectOf(oldObj); ok {
		c = w.updateChange(o, n)
	}
	w.handled(n, c)
}

func (w *Watcher) updateChange(o, n Object) *Change {
	// An unchanged resourceVersion is a relist or resync re-delivering what
	// was already emitted, not a change.
	if o.GetResourceVersion() == n.GetResourceVersion() || !w.cfg.Emits(config.OpUpdated) ||
		!w.shape.keep(OpUpdated, n, o) {
		return nil
	}
	c := w.change(OpUpdated, n, time.Now(), "")
	c.OldObject = o
	return c
}

func (w *Watcher) onDelete(obj any) {
	if w.handleHook != nil {
		w.handleHook()
	}
	unknown := false
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, unknown = d.Obj, true
	}
	if o, ok := objectOf(obj); ok {
		w.gone(o, w.deleteChange(o, unknown))
	}
}

func (w *Watcher) deleteChange(o Object, unknown bool) *Change {
	if !w.cfg.Emits(config.OpDeleted) || !w.shape.keep(OpDeleted, o, nil) {
		return nil
	}
	c := w.change(OpDeleted, o, time.Now(), "")
	c.FinalStateUnknown = unknown
	return c
}
