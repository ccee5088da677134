package sinktest

import (
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// BenchEvent is the CloudEvent of an update of object 0 of k, for the
// sinks' binding benchmarks.
func BenchEvent(tb testing.TB, k benchdata.Kind) *encoding.Event {
	tb.Helper()
	r := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	u := k.Cached(benchdata.DefaultSeed, 0, 2)
	ev, err := encoding.New(&informer.Change{Op: informer.OpUpdated, Resource: r, Key: r.ObjectKey(u.GetNamespace(), u.GetName()), Object: informer.FromUnstructured(u), Observed: time.Now()})
	if err != nil {
		tb.Fatal(err)
	}
	return ev
}
