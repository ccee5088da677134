package consumer

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

type handler struct{ h cache.ResourceEventHandler }

// AddEventHandler registers h for the View's changes, with client-go's
// contract: OnAdd, OnUpdate and OnDelete get *unstructured.Unstructured
// objects, or for a delete noticed by a relist (finalstateunknown, a
// snapshot prune, a tombstone alone) a cache.DeletedFinalStateUnknown
// holding the last state known. The objects are shared by every handler:
// do not modify them. Handlers are called one at a time, in the order the
// changes were applied, and a source commits an event only after every
// handler returned. The objects already held are delivered to h first, as
// adds with isInInitialList true.
func (v *View) AddEventHandler(h cache.ResourceEventHandler) {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.mu.Lock()
	v.handlers = append(v.handlers, handler{h})
	held, _ := v.objectsLocked("")
	v.mu.Unlock()
	for i := range held {
		if u, err := held[i].Decode(); err == nil {
			h.OnAdd(u, true)
		}
	}
}

// observe registers fn for every change, gaps included, called like the
// handlers. It is how a ListerWatcher follows the view.
func (v *View) observe(fn func(change)) {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.observers = append(v.observers, fn)
}

// deliver calls the handlers, observers and OnProblem; applyMu is held.
func (v *View) deliver(cs []change, ps []Problem) {
	for _, p := range ps {
		switch {
		case p.Reason == ProblemNotHeld:
			if v.opt.OnDeleteNotHeld != nil {
				v.opt.OnDeleteNotHeld(p)
			}
		case v.opt.OnProblem != nil:
			v.opt.OnProblem(p)
		}
	}
	if len(cs) == 0 {
		return
	}
	v.mu.RLock()
	hs, obs := v.handlers, v.observers
	v.mu.RUnlock()
	initial := !v.HasSynced()
	for _, c := range cs {
		for _, fn := range obs {
			fn(c)
		}
		if len(hs) == 0 || c.kind == watch.Error {
			continue
		}
		obj, err := c.obj.Decode()
		if err != nil {
			continue
		}
		switch c.kind {
		case watch.Added:
			for _, h := range hs {
				h.h.OnAdd(obj, initial || c.listed)
			}
		case watch.Modified:
			old, err := c.old.Decode()
			if err != nil {
				old = obj
			}
			for _, h := range hs {
				h.h.OnUpdate(old, obj)
			}
		case watch.Deleted:
			var gone any = obj
			if c.finalStateUnknown {
				gone = cache.DeletedFinalStateUnknown{Key: metaKey(obj), Obj: obj}
			}
			for _, h := range hs {
				h.h.OnDelete(gone)
			}
		}
	}
}

// metaKey is client-go's key of an object: <namespace>/<name> or <name>.
func metaKey(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return ns + "/" + u.GetName()
	}
	return u.GetName()
}
