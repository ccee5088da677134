package app_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// Issue 43: a CRD deleted while its watch is broken. The finalizer's
// deletes happen while kubewire cannot see them, and the relist after the
// break is answered 404, not with an empty list: no delete is ever
// streamed. resource.removed must then cover the objects still held, so
// that a consumer applying the stream does not keep them forever.
//
// Which comes first after the proxy lets connections through again is the
// apiserver's and client-go's timing: the widgets' relist answered 404
// (kubewire logs it), or the discoverer finding the CRD gone and stopping
// the watcher before it relists. Both happen (2 runs of 4 each, here), and
// the stream must be the same in both; the log line says which it was.
func TestACRDDeletedWhileItsWatchIsBrokenEndsWithResourceRemovedThatCoversWhatIsStillHeld(t *testing.T) {
	root := unique("broken") + ".example.com"
	ns := namespace(t)
	a := installCRD(t, "a."+root)
	createWidget(t, a, ns, "w1", "t")
	createWidget(t, a, ns, "w2", "t")

	proxy, err := cluster.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	k := apptest.Start(t, discoverConfig(root), proxy.RESTConfig(cluster, testcluster.AdminUser))
	prefix := "widgets.a." + root
	k.WaitFor(t, prefix+" snapshot", completed(prefix))

	proxy.Cut()
	deleteCRD(t, "widgets.a."+root)
	proxy.Resume()

	var evs []event.Event
	testkit.Within(t, 2*time.Minute, prefix+" resource.removed", func() bool {
		evs = eventsOf(k.Events(t), prefix)
		return slices.ContainsFunc(evs, func(ev event.Event) bool { return ev.Type() == encoding.TypeRemoved })
	}, k.Logs.String)
	if slices.ContainsFunc(evs, func(ev event.Event) bool { return ev.Type() == encoding.TypeDeleted }) {
		t.Fatalf("a delete was streamed (%v): the watch was not broken through the deletion, so this test proves nothing", typesOf(evs))
	}
	if last := evs[len(evs)-1]; last.Type() != encoding.TypeRemoved {
		t.Fatalf("events of %s after resource.removed: %v", prefix, typesOf(evs))
	}

	// A consumer that applies the stream holds nothing of the resource.
	v := consumer.NewView(consumer.Options{})
	for i := range evs {
		v.Apply(consumer.Position{Partition: "p0", Offset: int64(i)}, &evs[i])
	}
	if held := v.Objects(prefix); len(held) > 0 {
		var keys []string
		for _, o := range held {
			keys = append(keys, o.Key)
		}
		t.Errorf("after resource.removed the view still holds %v", keys)
	}
	t.Logf("list/watch refusals kubewire logged: %d with 404 (could not find the requested resource)",
		strings.Count(k.Logs.String(), "could not find the requested resource"))
}
