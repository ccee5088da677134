package informer

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// fakeNamespace records the options of each list and watch of one
// namespace and hands out fake watches the test drives.
type fakeNamespace struct {
	ns      string
	lists   []metav1.ListOptions
	watches []metav1.ListOptions
	fakes   []*watch.FakeWatcher
	listRV  string
}

func (f *fakeNamespace) listWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			f.lists = append(f.lists, o)
			l := &unstructured.UnstructuredList{}
			l.SetResourceVersion(f.listRV)
			l.Items = []unstructured.Unstructured{*object(f.ns, "listed", f.listRV)}
			return l, nil
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			f.watches = append(f.watches, o)
			fw := watch.NewFakeWithChanSize(4, false)
			f.fakes = append(f.fakes, fw)
			return fw, nil
		},
	}
}

func object(ns, name, rv string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetResourceVersion(rv)
	return u
}

func receive(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	e, ok := <-w.ResultChan()
	if !ok {
		t.Fatal("the merged watch ended early")
	}
	return e
}

func TestMergedNamespacesListAtOneVersionAndEachResumesFromWhatItDelivered(t *testing.T) {
	ctx := context.Background()
	a := &fakeNamespace{ns: "a", listRV: "10"}
	b := &fakeNamespace{ns: "b", listRV: "11"}
	lw := mergeNamespaces([]string{"a", "b"}, func(ns string) *cache.ListWatch {
		return map[string]*fakeNamespace{"a": a, "b": b}[ns].listWatch()
	}).ListWatch()

	l, err := lw.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	ul := l.(*unstructured.UnstructuredList)
	if len(ul.Items) != 2 || ul.GetResourceVersion() != "10" {
		t.Fatalf("merged list has %d items at version %q, want both namespaces' items at a's version 10", len(ul.Items), ul.GetResourceVersion())
	}
	if got := b.lists[0]; got.ResourceVersion != "10" || got.ResourceVersionMatch != metav1.ResourceVersionMatchExact || got.Limit != 0 {
		t.Errorf("b was listed with %+v, want exactly version 10, unpaged", got)
	}

	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	if a.watches[0].ResourceVersion != "10" || b.watches[0].ResourceVersion != "10" {
		t.Fatalf("first watches from %q and %q, want both from the list's 10", a.watches[0].ResourceVersion, b.watches[0].ResourceVersion)
	}
	// a delivers 14 and a bookmark at 20; b has 13 queued but the watch
	// stops before the reflector takes it.
	a.fakes[0].Modify(object("a", "x", "14"))
	if e := receive(t, w); versionOf(e.Object) != "14" {
		t.Fatalf("got %s at %s, want a's change at 14", e.Type, versionOf(e.Object))
	}
	a.fakes[0].Action(watch.Bookmark, object("", "", "20"))
	b.fakes[0].Modify(object("b", "y", "13"))
	w.Stop()
	for range w.ResultChan() {
	}

	// The reflector resumes from the last version it took, 14: b must not,
	// or its change at 13 would be lost.
	w2, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "14"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	if got := b.watches[1].ResourceVersion; got != "10" && got != "13" {
		t.Errorf("b resumed from %q, want from what b delivered (10, or 13 if the reflector took it)", got)
	}
	if got := a.watches[1].ResourceVersion; got != "14" && got != "20" {
		t.Errorf("a resumed from %q, want 14 or its bookmark's 20", got)
	}

	// One namespace's watch ending ends the merged watch, so the
	// reflector starts over.
	a.fakes[1].Stop()
	for range w2.ResultChan() {
	}
}
