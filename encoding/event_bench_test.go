package encoding_test

import (
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/benchdata"
)

// benchChange is an update of object 0 of k as the listener hands it on.
func benchChange(k benchdata.Kind) *informer.Change {
	r := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	u := k.Cached(benchdata.DefaultSeed, 0, 2)
	return &informer.Change{
		Op: informer.OpUpdated, Resource: r, Key: r.ObjectKey(u.GetNamespace(), u.GetName()),
		Object: u, OldObject: k.Cached(benchdata.DefaultSeed, 0, 1), Observed: time.Now(),
	}
}

// BenchmarkEvent is the CloudEvent build: attributes, extensions, and the
// object re-encoded to JSON as the event's data.
func BenchmarkEvent(b *testing.B) {
	for _, k := range benchdata.Kinds {
		b.Run(k.Name, func(b *testing.B) {
			c := benchChange(k)
			ev, err := encoding.Event(c)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(ev.Data())))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encoding.Event(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
