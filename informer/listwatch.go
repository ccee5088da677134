package informer

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// watchNamespaces are the namespaces that get a LIST and WATCH of their
// own: the configured ones when each is watched on its own (one namespace,
// or watchPerNamespace), else "" for one cluster-wide watch.
func (w *Watcher) watchNamespaces() []string {
	if w.res.Namespaced && w.cfg.PerNamespaceWatch() {
		return w.cfg.Namespaces
	}
	return []string{metav1.NamespaceAll}
}

// keep filters a cluster-wide watch down to the configured namespaces
// before objects are cached; nil when there is nothing to filter.
func (w *Watcher) keep() func(string) bool {
	if !w.res.Namespaced || len(w.cfg.Namespaces) < 2 || w.cfg.PerNamespaceWatch() {
		return nil
	}
	nss := slices.Clone(w.cfg.Namespaces)
	return func(ns string) bool { return slices.Contains(nss, ns) }
}

// listerWatcher is what the informer lists and watches with: lw(ns, keep)
// for one namespace or all of them, or one per namespace merged, wrapped
// so that shutdown can drain it. client tells the reflector whether it
// can stream lists; merged namespaces never do.
func (w *Watcher) listerWatcher(lw func(ns string, keep func(string) bool) *cache.ListWatch, client any) cache.ListerWatcher {
	nss := w.watchNamespaces()
	if len(nss) == 1 {
		return cache.ToListWatcherWithWatchListSemantics(w.source.wrap(lw(nss[0], w.keep())), client)
	}
	return listThenWatch{w.source.wrap(mergeNamespaces(nss, func(ns string) *cache.ListWatch { return lw(ns, nil) }))}
}

func (w *Watcher) newInformer() cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(
		w.listerWatcher(w.unstructuredListWatch, w.opt.Dynamic),
		&unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{ObjectDescription: w.gvr.String()},
	)
	// The transform runs on freshly decoded objects before they are cached,
	// so stripping managedFields saves the memory, not just the bytes, and
	// redacted values never sit in the cache at all.
	if t := w.shape.transformFunc(); t != nil {
		_ = inf.SetTransform(t)
	}
	_ = inf.SetWatchErrorHandlerWithContext(w.watchError)
	return inf
}

// unstructuredListWatch lists and watches ns ("" for all) through the
// dynamic client; keep, when set, drops objects of other namespaces.
func (w *Watcher) unstructuredListWatch(ns string, keep func(string) bool) *cache.ListWatch {
	ri := w.opt.Dynamic.Resource(w.gvr).Namespace(ns)
	tweak := func(o *metav1.ListOptions) {
		o.LabelSelector = w.cfg.LabelSelector
		o.FieldSelector = w.cfg.FieldSelector
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			l, err := ri.List(ctx, o)
			if err != nil || keep == nil {
				return l, err
			}
			l.Items = slices.DeleteFunc(l.Items, func(u unstructured.Unstructured) bool { return !keep(u.GetNamespace()) })
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			wi, err := ri.Watch(ctx, o)
			if err != nil || keep == nil {
				return wi, err
			}
			return watch.Filter(wi, func(e watch.Event) (watch.Event, bool) {
				if e.Type == watch.Bookmark || e.Type == watch.Error {
					return e, true
				}
				m, err := meta.Accessor(e.Object)
				return e, err != nil || keep(m.GetNamespace())
			}), nil
		},
	}
}

func stripManagedFields(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	}
	return obj, nil
}
