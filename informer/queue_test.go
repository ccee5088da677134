package informer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

func rawAt(t testing.TB, name, rv string) *raw.Object {
	t.Helper()
	o, err := raw.New([]byte(`{"metadata":{"name":"`+name+`","namespace":"ns","resourceVersion":"`+rv+`"}}`),
		raw.BuildOptions{KeyPrefix: "configmaps"})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// recorder is a handler that writes down what it is told.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func describe(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return "unknown(" + d.Key + ")@" + describe(d.Obj)
	}
	m, _ := obj.(interface {
		GetName() string
		GetResourceVersion() string
	})
	if m == nil {
		return fmt.Sprintf("%T", obj)
	}
	return m.GetName() + "@" + m.GetResourceVersion()
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recorder) OnAdd(obj any, initial bool) {
	r.add(fmt.Sprintf("add %s initial=%v", describe(obj), initial))
}
func (r *recorder) OnUpdate(old, obj any) { r.add("update " + describe(old) + " -> " + describe(obj)) }
func (r *recorder) OnDelete(obj any)      { r.add("delete " + describe(obj)) }

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// scripted is a ListerWatcher that serves lists[i] to the i-th list and
// watches[i] to the i-th watch; a watch past the script stays open and
// quiet.
type scripted struct {
	mu               sync.Mutex
	lists            []*raw.List
	watches          [][]watch.Event
	nLists, nWatches int
}

func (s *scripted) lw() cache.ListerWatcher {
	return listThenWatch{&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			l := s.lists[min(s.nLists, len(s.lists)-1)]
			s.nLists++
			return l.DeepCopyObject(), nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			w := watch.NewRaceFreeFake()
			if s.nWatches < len(s.watches) {
				for _, e := range s.watches[s.nWatches] {
					w.Action(e.Type, e.Object)
				}
			}
			s.nWatches++
			return w, nil
		},
	}}
}

func list(rv string, items ...*raw.Object) *raw.List {
	return &raw.List{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: items}
}

// The queue replaces client-go's shared informer (its RealFIFO and
// processor listener); a handler must not be able to tell the difference,
// through watch events and a relist that finds objects added, changed and
// deleted while no watch was open.
func TestTheQueueNotifiesAsClientGosSharedInformerDoes(t *testing.T) {
	expired := &apierrors.NewResourceExpired("too old resource version").ErrStatus
	script := func() *scripted {
		return &scripted{
			lists: []*raw.List{
				list("1", rawAt(t, "a", "1"), rawAt(t, "b", "1")),
				// The relist: c went unseen, a changed, d is new.
				list("9", rawAt(t, "a", "5"), rawAt(t, "b", "3"), rawAt(t, "d", "7")),
			},
			watches: [][]watch.Event{{
				{Type: watch.Modified, Object: rawAt(t, "a", "2")},
				{Type: watch.Added, Object: rawAt(t, "c", "3")},
				{Type: watch.Modified, Object: rawAt(t, "b", "3")},
				{Type: watch.Deleted, Object: rawAt(t, "b", "3")},
				{Type: watch.Added, Object: rawAt(t, "b", "4")},
				{Type: watch.Error, Object: expired},
			}, {
				{Type: watch.Modified, Object: rawAt(t, "d", "10")},
			}},
		}
	}
	want := []string{
		"add a@1 initial=true", "add b@1 initial=true",
		"update a@1 -> a@2", "add c@3 initial=false", "update b@1 -> b@3", "delete b@3", "add b@4 initial=false",
		"delete unknown(ns/c)@c@3", "update a@2 -> a@5", "update b@4 -> b@3", "add d@7 initial=false",
		"update d@7 -> d@10",
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	theirs := &recorder{}
	inf := cache.NewSharedIndexInformerWithOptions(script().lw(), &raw.Object{}, cache.SharedIndexInformerOptions{})
	reg, err := inf.AddEventHandler(theirs)
	if err != nil {
		t.Fatal(err)
	}
	ours := &recorder{}
	q := newResourceInformer("configmaps", script().lw(), &raw.Object{}, nil, ours, nil)
	wg.Add(2)
	go func() { defer wg.Done(); inf.RunWithContext(ctx) }()
	go func() { defer wg.Done(); q.Run(ctx) }()

	testkit.Within(t, 10*time.Second, "client-go's informer to deliver the script",
		func() bool { return len(theirs.got()) >= len(want) },
		func() string { return fmt.Sprint(theirs.got()) })
	if got := theirs.got(); !slices.Equal(got, want) {
		// The reference moved: the script no longer says what it means.
		t.Fatalf("client-go's shared informer notified\n%q\nwant\n%q", got, want)
	}
	testkit.Eventually(t, "the queue to deliver the script",
		func() bool { return len(ours.got()) >= len(want) },
		func() string { return fmt.Sprint(ours.got()) })
	if got := ours.got(); !slices.Equal(got, want) {
		t.Fatalf("the queue notified\n%q\nclient-go's shared informer\n%q", got, want)
	}
	if !reg.HasSynced() || !q.HasSynced() {
		t.Fatalf("synced: client-go %v, queue %v", reg.HasSynced(), q.HasSynced())
	}
	if got, want := q.GetStore().ListKeys(), inf.GetStore().ListKeys(); !sameKeys(got, want) {
		t.Fatalf("the queue's store holds %v, client-go's %v", got, want)
	}
}

func sameKeys(a, b []string) bool {
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// popAll pops what is queued, recording it, without waiting.
func popAll(t *testing.T, q *notifyQueue, r *recorder) {
	t.Helper()
	i := &resourceInformer{queue: q, handler: r}
	for {
		q.mu.Lock()
		empty := q.head == len(q.items)
		q.mu.Unlock()
		if empty {
			return
		}
		if _, err := q.Pop(i.process); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTheQueueHasSyncedOnceTheHandlerHasTheFirstList(t *testing.T) {
	q := newNotifyQueue("test", nil)
	r := &recorder{}
	i := &resourceInformer{queue: q, handler: r}
	if err := q.Replace([]any{rawAt(t, "a", "1"), rawAt(t, "b", "1")}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := q.Update(rawAt(t, "a", "2")); err != nil {
		t.Fatal(err)
	}
	for n := range 2 {
		if q.HasSynced() {
			t.Fatalf("synced with %d of the 2 listed objects handled", n)
		}
		if _, err := q.Pop(i.process); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-q.HasSyncedChecker().Done():
	default:
		t.Fatal("not synced once the listed objects are handled")
	}
	popAll(t, q, r)
	if want := []string{"add a@1 initial=true", "add b@1 initial=true", "update a@1 -> a@2"}; !slices.Equal(r.got(), want) {
		t.Fatalf("got %q, want %q", r.got(), want)
	}

	// A watch event before any list: nothing initial to wait for.
	q = newNotifyQueue("test", nil)
	if err := q.Add(rawAt(t, "a", "1")); err != nil {
		t.Fatal(err)
	}
	if !q.HasSynced() {
		t.Fatal("not synced after a first change that is not a list")
	}
}

func TestAClosedQueueReturnsOnceEmpty(t *testing.T) {
	q := newNotifyQueue("test", nil)
	r := &recorder{}
	i := &resourceInformer{queue: q, handler: r}
	if err := q.Add(rawAt(t, "a", "1")); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if _, err := q.Pop(i.process); err != nil {
		t.Fatalf("the queued notification: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := q.Pop(i.process); done <- err }()
	select {
	case err := <-done:
		if err != cache.ErrFIFOClosed {
			t.Fatalf("Pop on a closed, empty queue returned %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Pop on a closed, empty queue blocked")
	}
}

func TestTheQueueTransformsWhatItStoresButNotTombstones(t *testing.T) {
	var seen []string
	q := newNotifyQueue("test", func(obj any) (any, error) {
		seen = append(seen, describe(obj))
		if u, ok := obj.(*unstructured.Unstructured); ok {
			u.SetLabels(map[string]string{"t": "1"})
		}
		return obj, nil
	})
	u := &unstructured.Unstructured{}
	u.SetNamespace("ns")
	u.SetName("a")
	u.SetResourceVersion("1")
	if err := q.Add(u); err != nil {
		t.Fatal(err)
	}
	stored, ok, _ := q.store.GetByKey("ns/a")
	if !ok || stored.(*unstructured.Unstructured).GetLabels()["t"] != "1" {
		t.Fatalf("stored %v", stored)
	}
	// The relist drops a: its tombstone holds the stored (transformed)
	// object and is not transformed again.
	if err := q.Replace(nil, "2"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a@1"}; !slices.Equal(seen, want) {
		t.Fatalf("transformed %q, want %q", seen, want)
	}
}

func TestTheStoreKeyIsClientGosKey(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetNamespace("ns")
	u.SetName("u")
	for _, obj := range []any{
		rawAt(t, "a", "1"), mustRaw(t, `{"metadata":{"name":"cluster-scoped"}}`), u,
		cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: rawAt(t, "gone", "1")},
	} {
		want, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if got, gotErr := storeKey(obj); got != want || (err == nil) != (gotErr == nil) {
			t.Errorf("storeKey(%s) = %q, %v; client-go's key is %q, %v", describe(obj), got, gotErr, want, err)
		}
	}
}

func mustRaw(t *testing.T, s string) *raw.Object {
	t.Helper()
	o, err := raw.New([]byte(s), raw.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// On the raw cache a watched change costs the queue nothing: the key comes
// with the object, and the notification is queued and handed over by
// value. (The shared informer allocated about 12 times per event here.)
func TestAWatchedUpdateAllocatesNothingOnItsWayToTheHandler(t *testing.T) {
	k := benchdata.ConfigMaps
	q := newNotifyQueue("test", nil)
	i := &resourceInformer{queue: q, handler: cache.ResourceEventHandlerDetailedFuncs{
		UpdateFunc: func(old, obj any) {},
	}}
	states := []*raw.Object{rawCached(k, 0, 1, "1"), rawCached(k, 0, 2, "2")}
	if err := q.Replace([]any{states[0]}, "1"); err != nil {
		t.Fatal(err)
	}
	popAll(t, q, &recorder{})
	n := 0
	allocs := testing.AllocsPerRun(500, func() {
		n++
		if err := q.Update(states[n%2]); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Pop(i.process); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("an update allocates %v times between the reflector and the handler, want 0", allocs)
	}
}
