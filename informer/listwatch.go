package informer

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/shape"
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
//
// Lists are never streamed (WatchList): resuming needs a LIST at an exact
// version, which a streamed list cannot ask for, and a relist must go
// through the resumer to be resumed or declared a gap.
func (w *Watcher) listerWatcher(lw func(ns string, keep func(string) bool) *cache.ListWatch) cache.ListerWatcher {
	nss := w.watchNamespaces()
	r := &resumer{resource: w.name, start: w.resume, log: w.log}
	w.resumer = r
	if len(nss) == 1 {
		r.stream = streamKey(nss[0])
		return listThenWatch{w.source.wrap(r.wrap(lw(nss[0], w.keep())))}
	}
	m := mergeNamespaces(nss, func(ns string) *cache.ListWatch { return lw(ns, nil) })
	r.merged, r.positions = true, m.positions
	return listThenWatch{w.source.wrap(r.wrap(m.ListWatch()))}
}

// watchRefused hands the resumer every ERROR event of a watch.
func (w *Watcher) watchRefused(err error) { w.resumer.watchRefused(err) }

// streamKey is the key of a single watch's stream in a checkpoint: the
// namespace it is limited to, or "" for the whole cluster.
func streamKey(ns string) string { return ns }

// newInformer builds the informer of the configured cache, and the drain
// source it lists and watches through. The caches differ here (what they
// list and watch with, the type they hold, the drain sentinel of that type,
// the transform) and in objectOf, nowhere else.
func (w *Watcher) newInformer() (*resourceInformer, error) {
	var (
		lw        func(ns string, keep func(string) bool) *cache.ListWatch
		example   runtime.Object
		sentinel  runtime.Object
		transform cache.TransformFunc
		err       error
	)
	if w.cfg.RawCache() {
		if lw, err = w.rawListWatch(); err != nil {
			return nil, err
		}
		example = &raw.Object{}
		// The raw ListerWatcher cuts managedFields and redacts while it
		// copies the bytes: no transform.
		if sentinel, err = raw.New([]byte(`{"metadata":{"name":"`+drainName+`"}}`), raw.BuildOptions{}); err != nil {
			return nil, fmt.Errorf("drain sentinel: %w", err)
		}
	} else {
		lw, example = w.unstructuredListWatch, &unstructured.Unstructured{}
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetName(drainName)
		sentinel = u
		// The transform runs on freshly decoded objects before they are
		// cached, so stripping managedFields saves the memory, not just the
		// bytes, and redacted values never sit in the cache at all.
		transform = w.shape.transformFunc()
	}
	// The sentinel is of the informer's own type: the reflector drops an
	// event of any other type.
	w.source = newDrainSource(sentinel)
	handler := cache.ResourceEventHandlerDetailedFuncs{AddFunc: w.onAdd, UpdateFunc: w.onUpdate, DeleteFunc: w.onDelete}
	inf := newResourceInformer(w.gvr.String(), w.listerWatcher(lw), example, transform, handler, w.watchError)
	inf.queue.onReplace = w.source.listed
	inf.queue.takeGaps = w.resumer.takeGaps
	inf.stream = w
	w.resumer.lastSync = inf.controller.LastSyncResourceVersion
	return inf, nil
}

// rawListWatch lists and watches through the raw REST client, building raw
// Objects from the served bytes.
func (w *Watcher) rawListWatch() (func(ns string, keep func(string) bool) *cache.ListWatch, error) {
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
	return func(ns string, keep func(string) bool) *cache.ListWatch {
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
			KeyPrefix:         w.res.KeyPrefix,
			WatchError:        w.watchRefused,
		})
	}, nil
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
			if err != nil {
				return wi, err
			}
			// The dynamic client's decoder cannot be told to report ERROR
			// events, as the raw cache's is: a filter sees them, at the
			// cost of one more goroutine per watch on this fallback path.
			return watch.Filter(wi, func(e watch.Event) (watch.Event, bool) {
				switch e.Type {
				case watch.Error:
					w.watchRefused(apierrors.FromObject(e.Object))
					return e, true
				case watch.Bookmark:
					return e, true
				}
				if keep == nil {
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
