package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// The wire tests write with kubewire's own sinks and read back with the
// sources: the scenario below covers adds, an update, a delete (and its
// tombstone on Kafka), and a snapshot that prunes an object it did not list
// while one created during it survives.

var resource = sinktest.Resource.KeyPrefix

func scenario(snapshotID string) [][]*informer.Change {
	c := sinktest.Change
	marker := func(op informer.Op, count int) *informer.Change {
		return &informer.Change{Op: op, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
			SnapshotID: snapshotID, Count: count, Observed: time.Now()}
	}
	synced := func(ns, name string, rv int) *informer.Change {
		ch := c(informer.OpSynced, ns, name, rv)
		ch.SnapshotID = snapshotID
		return ch
	}
	return [][]*informer.Change{
		{c(informer.OpAdded, "team-a", "a", 1), c(informer.OpAdded, "team-a", "b", 2), c(informer.OpAdded, "team-b", "c", 3), c(informer.OpAdded, "team-a", "d", 4)},
		{c(informer.OpUpdated, "team-a", "a", 5), c(informer.OpDeleted, "team-a", "b", 6)},
		{marker(informer.OpSnapshotStarted, 0)},
		{synced("team-a", "a", 5), c(informer.OpAdded, "team-a", "e", 7)},
		{synced("team-b", "c", 3)},
		{marker(informer.OpSnapshotCompleted, 2)},
	}
}

// scenarioHolds is what a consumer holds after the scenario: d was pruned.
var scenarioHolds = []string{"a@5#uid-team-a-a", "c@3#uid-team-b-c", "e@7#uid-team-a-e"}

// write sends every batch of changes through s.
func write(t *testing.T, s sinks.Sink, batches [][]*informer.Change) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range batches {
		evs := make([]*encoding.Event, 0, len(b))
		for _, c := range b {
			ev, err := encoding.New(c)
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
		if err := s.Write(ctx, evs); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
}

// identities lists objects as "name@rv#uid", sorted.
func identities[T any](objs []T, get func(T) *unstructured.Unstructured) []string {
	out := []string{}
	for _, o := range objs {
		u := get(o)
		out = append(out, u.GetName()+"@"+u.GetResourceVersion()+"#"+string(u.GetUID()))
	}
	sort.Strings(out)
	return out
}

func viewHolds(t *testing.T, v *consumer.View) []string {
	t.Helper()
	l, err := v.List()
	if err != nil {
		t.Fatal(err)
	}
	return identities(l, func(u *unstructured.Unstructured) *unstructured.Unstructured { return u })
}

// checkViewAndInformer requires the view, once synced, and an informer
// built on it to hold exactly want.
func checkViewAndInformer(t *testing.T, v *consumer.View, want []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := v.WaitForSync(ctx); err != nil {
		t.Fatalf("the view did not sync: %v", err)
	}
	// Synced means caught up to the end offsets the source saw when it
	// started; under load a broker can acknowledge a write before its
	// high watermark moves, so a record written just before may be read a
	// moment after the sync.
	testkit.Eventually(t, "the view to hold what was written", func() bool { return reflect.DeepEqual(viewHolds(t, v), want) },
		func() string {
			return fmt.Sprintf("the view holds %v, want %v (stats %+v)", viewHolds(t, v), want, v.Stats())
		})
	inf := consumer.NewSharedIndexInformer(v, resource, 0, nil)
	ictx, icancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ictx); close(done) }()
	defer func() { icancel(); <-done }()
	testkit.Eventually(t, "the informer to sync", inf.HasSynced)
	got := identities(inf.GetStore().List(), func(o any) *unstructured.Unstructured { return o.(*unstructured.Unstructured) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the informer's store holds %v, want %v", got, want)
	}
}

// runSource runs a source until stop is called or the test ends.
func runSource(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("source: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// connectSink connects s and closes it when the test ends.
func connectSink(t *testing.T, s sinks.Sink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
}
