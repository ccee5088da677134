package informer

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// namespaceMerge is one ListerWatcher over several namespaces, each listed
// and watched on its own namespaced endpoint, so that a Role in each of
// them is all the permission the informer needs (watchPerNamespace).
//
// Two things make the merged stream safe for one reflector:
//   - List reads every namespace at one resourceVersion: the first
//     namespace's list fixes it, the others are read with
//     resourceVersionMatch=Exact. The result is one consistent snapshot,
//     and a watch from that version misses nothing in any namespace.
//   - The reflector resumes a watch from the version of the last event it
//     took, but events of different namespaces arrive interleaved, so that
//     version may be ahead of changes another namespace had not yet
//     delivered. Each namespace therefore resumes from the version of the
//     last event it delivered itself (or its last bookmark), whatever
//     version the reflector asks for.
//
// The reflector runs one list or watch at a time, and namespaceMerge
// relies on that.
type namespaceMerge struct {
	namespaces []string
	lws        []*cache.ListWatch // per namespace, in the order of namespaces

	mu sync.Mutex
	// from is, per namespace, the resourceVersion its next watch starts
	// from: the list's, then that of each event delivered or bookmark seen.
	from map[string]string
}

// mergeNamespaces returns the merged ListWatch of namespaces; lw builds the
// ListWatch of one namespace.
func mergeNamespaces(namespaces []string, lw func(ns string) *cache.ListWatch) *namespaceMerge {
	m := &namespaceMerge{namespaces: namespaces, from: make(map[string]string, len(namespaces))}
	for _, ns := range namespaces {
		m.lws = append(m.lws, lw(ns))
	}
	return m
}

// ListWatch is the merged ListWatch.
func (m *namespaceMerge) ListWatch() *cache.ListWatch {
	return &cache.ListWatch{ListWithContextFunc: m.list, WatchFuncWithContext: m.watch}
}

// positions is, per namespace, the version its watch has delivered
// everything up to.
func (m *namespaceMerge) positions() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.from)
}

// listThenWatch tells the reflector not to stream the initial list: the
// initial-events-end bookmark of one namespace's watch would end the
// initial list of all of them.
type listThenWatch struct{ cache.ListerWatcher }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (m *namespaceMerge) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	// Each namespace is read whole: a continue token could not say which
	// namespace it belongs to.
	opts.Limit, opts.Continue = 0, ""
	var (
		merged runtime.Object
		items  []runtime.Object
		rv     string
	)
	for i, ns := range m.namespaces {
		o := opts
		if i > 0 {
			o.ResourceVersion, o.ResourceVersionMatch = rv, metav1.ResourceVersionMatchExact
		}
		l, err := m.lws[i].ListWithContext(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("listing namespace %q: %w", ns, err)
		}
		if i == 0 {
			la, err := meta.ListAccessor(l)
			if err != nil {
				return nil, err
			}
			merged, rv = l, la.GetResourceVersion()
		}
		if err := meta.EachListItem(l, func(o runtime.Object) error {
			items = append(items, o)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if err := meta.SetList(merged, items); err != nil {
		return nil, err
	}
	m.mu.Lock()
	for _, ns := range m.namespaces {
		m.from[ns] = rv
	}
	m.mu.Unlock()
	return merged, nil
}

// advance records that ns has delivered everything up to version rv.
func (m *namespaceMerge) advance(ns, rv string) {
	if rv == "" {
		return
	}
	m.mu.Lock()
	m.from[ns] = rv
	m.mu.Unlock()
}

// versionOf is obj's resourceVersion, or "" for an object without one.
func versionOf(obj runtime.Object) string {
	a, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return a.GetResourceVersion()
}

func (m *namespaceMerge) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	mw := &mergedWatch{out: make(chan watch.Event), done: make(chan struct{})}
	subs := make([]watch.Interface, 0, len(m.namespaces))
	for i, ns := range m.namespaces {
		o := opts
		m.mu.Lock()
		if rv := m.from[ns]; rv != "" {
			o.ResourceVersion = rv
		}
		m.mu.Unlock()
		w, err := m.lws[i].WatchWithContext(ctx, o)
		if err != nil {
			for _, s := range subs {
				s.Stop()
			}
			return nil, fmt.Errorf("watching namespace %q: %w", ns, err)
		}
		subs = append(subs, w)
	}
	mw.wg.Add(len(subs))
	for i, s := range subs {
		go mw.forward(m, m.namespaces[i], s)
	}
	go func() {
		mw.wg.Wait()
		close(mw.out)
	}()
	return mw, nil
}

// mergedWatch forwards the events of every namespace's watch. It ends when
// the reflector stops it or when any namespace's watch ends, so that the
// reflector starts over and each namespace resumes where it left off.
type mergedWatch struct {
	out  chan watch.Event
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func (w *mergedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *mergedWatch) Stop() { w.once.Do(func() { close(w.done) }) }

func (w *mergedWatch) forward(m *namespaceMerge, ns string, sub watch.Interface) {
	defer w.wg.Done()
	defer sub.Stop()
	in := sub.ResultChan()
	for {
		var e watch.Event
		var ok bool
		select {
		case <-w.done:
			return
		case e, ok = <-in:
		}
		if !ok {
			w.Stop()
			return
		}
		// Read before sending: once sent, the object belongs to the
		// reflector, whose transform edits it.
		rv := versionOf(e.Object)
		if e.Type == watch.Bookmark {
			// A bookmark says this namespace has nothing older left; a
			// quiet namespace then resumes from a version the apiserver
			// still has. The reflector needs no bookmark of its own.
			m.advance(ns, rv)
			continue
		}
		select {
		case w.out <- e:
		case <-w.done:
			return
		}
		if e.Type != watch.Error {
			m.advance(ns, rv)
		}
	}
}
