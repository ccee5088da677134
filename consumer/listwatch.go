package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// DefaultWatchHistory is how many changes a ListerWatcher keeps for watches
// that start behind the view.
const DefaultWatchHistory = 10000

// maxWatchQueue bounds the changes queued for one slow watch; beyond it the
// watch ends with 410 Gone and its informer lists again.
const maxWatchQueue = 100000

// ListerWatcher is a client-go cache.ListerWatcher over a View, so that an
// informer (and the controller code on it) runs against the broker instead
// of an API server.
//
//   - List waits until the View has synced, and returns its objects of one
//     resource. The list's resourceVersion is the broker position the view
//     stood at (every partition's next offset), opaque to the caller.
//   - Watch continues from such a position: it sends every change of the
//     view after it, then follows the view, with bookmarks carrying the
//     position when asked for them. Objects keep their own
//     resourceVersions.
//   - A position older than the changes kept (DefaultWatchHistory), one
//     from before a gap in the broker (View.Gap), and a resourceVersion
//     that is not such a position get 410 Gone, and a running watch ends
//     with 410 when a gap happens: the reflector then lists again.
//
// Label and field selectors are not supported. WatchList (streaming lists)
// is not either: the reflector falls back to List and Watch.
type ListerWatcher struct {
	v        *View
	resource string
	max      int

	mu      sync.Mutex
	history []change
	// floor holds, per partition, the offset below which changes may be
	// missing from history: evicted, or lost in a gap.
	floor    Positions
	watchers map[*watcher]struct{}
}

var (
	_ cache.ListerWatcherWithContext = (*ListerWatcher)(nil)
	_ cache.ListerWatcher            = (*ListerWatcher)(nil)
)

// NewListerWatcher returns a ListerWatcher of one resource of v (its
// partition key prefix, e.g. "configmaps"; "" for every resource). It
// follows v from now on, for as long as v lives.
func NewListerWatcher(v *View, resource string) *ListerWatcher {
	lw := &ListerWatcher{v: v, resource: resource, max: DefaultWatchHistory, floor: Positions{}, watchers: map[*watcher]struct{}{}}
	// Changes applied before now are in every List; a watch from a
	// position before now finds them missing and relists.
	v.mu.RLock()
	for p, o := range v.pos {
		lw.floor[p] = o
	}
	v.mu.RUnlock()
	v.observe(lw.record)
	return lw
}

// NewSharedIndexInformer returns a client-go informer of one resource of v,
// holding *unstructured.Unstructured objects. With no indexers it indexes
// by namespace.
func NewSharedIndexInformer(v *View, resource string, resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
	if indexers == nil {
		indexers = cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	}
	return cache.NewSharedIndexInformer(NewListerWatcher(v, resource), &unstructured.Unstructured{}, resync, indexers)
}

// IsWatchListSemanticsUnSupported tells client-go's reflector to list and
// watch rather than stream a watch list.
func (lw *ListerWatcher) IsWatchListSemanticsUnSupported() bool { return true }

var errSelectors = errors.New("consumer: label and field selectors are not supported")

// List is ListWithContext without a context.
func (lw *ListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

// ListWithContext returns the view's objects and its position.
func (lw *ListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if opts.LabelSelector != "" || opts.FieldSelector != "" {
		return nil, errSelectors
	}
	if err := lw.v.WaitForSync(ctx); err != nil {
		return nil, err
	}
	lw.v.mu.RLock()
	objs, pos := lw.v.objectsLocked(lw.resource)
	lw.v.mu.RUnlock()
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	list.Items = make([]unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		u, err := o.Decode()
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *u)
	}
	list.SetResourceVersion(pos.encode())
	return list, nil
}

// Watch is WatchWithContext without a context.
func (lw *ListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// WatchWithContext watches the view from the position opts.ResourceVersion
// names. The watch ends when ctx does, when Stop is called, after
// opts.TimeoutSeconds, or with 410 Gone after a gap.
func (lw *ListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.LabelSelector != "" || opts.FieldSelector != "" {
		return nil, errSelectors
	}
	from, err := decodePositions(opts.ResourceVersion)
	if err != nil {
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("resourceVersion %q: %v", opts.ResourceVersion, err))
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for p, f := range lw.floor {
		if from[p] < f {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("partition %s: position %d is older than the changes kept (from %d)", p, from[p], f))
		}
	}
	w := &watcher{lw: lw, at: from, out: make(chan watch.Event), done: make(chan struct{}), bookmarks: opts.AllowWatchBookmarks}
	w.cond = sync.NewCond(&w.mu)
	for _, c := range lw.history {
		w.offer(c)
	}
	lw.watchers[w] = struct{}{}
	var timeout <-chan time.Time
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.After(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-timeout:
		case <-w.done:
		}
		w.Stop()
	}()
	go w.run()
	return w, nil
}

// record keeps a change of the view and hands it to every watch. It is
// called under the View's applyMu, in the order changes were applied.
func (lw *ListerWatcher) record(c change) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if c.kind == watch.Error {
		if c.pos.Offset > lw.floor[c.pos.Partition] {
			lw.floor[c.pos.Partition] = c.pos.Offset
		}
		for w := range lw.watchers {
			w.expire(fmt.Sprintf("events of partition %s were lost before offset %d", c.pos.Partition, c.pos.Offset))
		}
		return
	}
	if lw.resource != "" && resourceOf(c.key) != lw.resource {
		return
	}
	lw.history = append(lw.history, c)
	if len(lw.history) > lw.max {
		old := lw.history[0]
		lw.history = lw.history[1:]
		if old.pos.Offset+1 > lw.floor[old.pos.Partition] {
			lw.floor[old.pos.Partition] = old.pos.Offset + 1
		}
	}
	for w := range lw.watchers {
		w.offer(c)
	}
}

func (lw *ListerWatcher) forget(w *watcher) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	delete(lw.watchers, w)
}

// watcher is one watch: a queue filled by record and drained to out by its
// own goroutine, so that applying never waits for a slow reader.
type watcher struct {
	lw        *ListerWatcher
	out       chan watch.Event
	done      chan struct{}
	stopOnce  sync.Once
	bookmarks bool

	mu      sync.Mutex
	cond    *sync.Cond
	at      Positions // the position of the last change queued
	queue   []change
	expired string
	stopped bool
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.out }

func (w *watcher) Stop() {
	w.stopOnce.Do(func() {
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
		w.cond.Broadcast()
		close(w.done)
		w.lw.forget(w)
	})
}

// offer queues c if it lies after the watch's position.
func (w *watcher) offer(c change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.pos.Offset < w.at[c.pos.Partition] || w.expired != "" {
		return
	}
	if len(w.queue) >= maxWatchQueue {
		w.queue, w.expired = nil, "the watch fell too far behind the view"
		w.cond.Broadcast()
		return
	}
	w.queue = append(w.queue, c)
	w.cond.Broadcast()
}

func (w *watcher) expire(why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue, w.expired = nil, why
	w.cond.Broadcast()
}

func (w *watcher) run() {
	defer close(w.out)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && w.expired == "" && !w.stopped {
			w.cond.Wait()
		}
		batch, expired, stopped := w.queue, w.expired, w.stopped
		w.queue = nil
		w.mu.Unlock()
		if stopped {
			return
		}
		if expired != "" {
			st := apierrors.NewResourceExpired(expired).ErrStatus
			w.send(watch.Event{Type: watch.Error, Object: &st})
			return
		}
		pos := Positions{}
		for _, c := range batch {
			u, err := c.obj.Decode()
			if err != nil {
				continue
			}
			if !w.send(watch.Event{Type: c.kind, Object: u}) {
				return
			}
			pos[c.pos.Partition] = c.pos.Offset + 1
		}
		w.mu.Lock()
		for p, o := range pos {
			if o > w.at[p] {
				w.at[p] = o
			}
		}
		rv := w.at.encode()
		w.mu.Unlock()
		if w.bookmarks {
			b := &unstructured.Unstructured{Object: map[string]any{}}
			b.SetResourceVersion(rv)
			if !w.send(watch.Event{Type: watch.Bookmark, Object: b}) {
				return
			}
		}
	}
}

func (w *watcher) send(e watch.Event) bool {
	select {
	case w.out <- e:
		return true
	case <-w.done:
		return false
	}
}
