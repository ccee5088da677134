package consumer_test

import (
	"context"
	"reflect"
	"sort"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// storeHolds lists an informer store as "name@rv", sorted.
func storeHolds(s cache.Store) []string {
	out := []string{}
	for _, o := range s.List() {
		u := o.(*unstructured.Unstructured)
		out = append(out, u.GetName()+"@"+u.GetResourceVersion())
	}
	sort.Strings(out)
	return out
}

// countingLW counts lists.
type countingLW struct {
	*consumer.ListerWatcher
	lists atomic.Int32
}

func (c *countingLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	c.lists.Add(1)
	return c.ListerWatcher.ListWithContext(ctx, o)
}

func (c *countingLW) List(o metav1.ListOptions) (runtime.Object, error) {
	return c.ListWithContext(context.Background(), o)
}

func startInformer(t *testing.T, lw cache.ListerWatcher) cache.SharedIndexInformer {
	t.Helper()
	inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	return inf
}

func TestAnInformerOnTheViewFollowsItAndListsAgainAfterAGap(t *testing.T) {
	v := consumer.NewView(consumer.Options{})
	offset := int64(0)
	apply := func(s step) {
		v.Apply(consumer.Position{Partition: "p0", Offset: offset}, s.ev)
		offset++
	}
	apply(obj(encoding.TypeAdded, "a", "1"))
	apply(obj(encoding.TypeAdded, "b", "2"))
	lw := &countingLW{ListerWatcher: consumer.NewListerWatcher(v, "configmaps")}
	inf := startInformer(t, lw)
	if got := storeHolds(inf.GetStore()); !reflect.DeepEqual(got, []string{"a@1", "b@2"}) {
		t.Fatalf("after the list the store holds %v", got)
	}

	apply(obj(encoding.TypeUpdated, "a", "3"))
	apply(obj(encoding.TypeDeleted, "b", "4"))
	apply(obj(encoding.TypeAdded, "c", "5"))
	want := []string{"a@3", "c@5"}
	testkit.Eventually(t, "the watch to bring the changes", func() bool { return reflect.DeepEqual(storeHolds(inf.GetStore()), want) },
		func() string { return "store holds " + fmtList(storeHolds(inf.GetStore())) })
	if n := lw.lists.Load(); n != 1 {
		t.Fatalf("%d lists before any gap, want 1", n)
	}

	// Events are lost: the view goes on at offset 100, and the informer
	// must list again rather than trust its watch.
	v.Gap("p0", 100)
	offset = 100
	apply(obj(encoding.TypeAdded, "d", "7"))
	testkit.Eventually(t, "a relist after the gap", func() bool { return lw.lists.Load() >= 2 })
	want = []string{"a@3", "c@5", "d@7"}
	testkit.Eventually(t, "the store to hold the view after the relist", func() bool { return reflect.DeepEqual(storeHolds(inf.GetStore()), want) },
		func() string { return fmtList(storeHolds(inf.GetStore())) })
}

func fmtList(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

func TestAWatchFromAPositionItCannotContinueFromIsGone(t *testing.T) {
	v := consumer.NewView(consumer.Options{})
	v.Apply(consumer.Position{Partition: "p0", Offset: 0}, obj(encoding.TypeAdded, "a", "1").ev)
	lw := consumer.NewListerWatcher(v, "")
	l, err := lw.List(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listRV := l.(*unstructured.UnstructuredList).GetResourceVersion()
	v.Gap("p0", 50)
	for _, tc := range []struct{ name, rv string }{
		{"an API server's resourceVersion", "12345"},
		{"an empty resourceVersion", ""},
		{"a position from before a gap", listRV},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := lw.Watch(metav1.ListOptions{ResourceVersion: tc.rv})
			if err == nil {
				w.Stop()
			}
			if !apierrors.IsResourceExpired(err) {
				t.Fatalf("Watch(%q) = %v, want 410 Expired", tc.rv, err)
			}
		})
	}
}
