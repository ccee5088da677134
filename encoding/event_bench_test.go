package encoding_test

import (
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// benchChange is an update of object 0 of k as the listener hands it on.
func benchChange(k benchdata.Kind) *informer.Change {
	r := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	u := k.Cached(benchdata.DefaultSeed, 0, 2)
	return &informer.Change{
		Op: informer.OpUpdated, Resource: r, Key: r.ObjectKey(u.GetNamespace(), u.GetName()),
		Object: informer.FromUnstructured(u), OldObject: informer.FromUnstructured(k.Cached(benchdata.DefaultSeed, 0, 1)), Observed: time.Now(),
	}
}

// BenchmarkEvent is the CloudEvent build: attributes, extensions, and the
// object re-encoded to JSON as the event's data.
func BenchmarkEvent(b *testing.B) {
	for _, k := range benchdata.Kinds {
		b.Run(k.Name, func(b *testing.B) {
			c := benchChange(k)
			ev, err := encoding.New(c)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(ev.Data())))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encoding.New(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchRawChange is benchChange on the raw cache: the event's data is the
// cached bytes.
func benchRawChange(k benchdata.Kind) *informer.Change {
	r := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	o := func(rv int64) *raw.Object {
		o, err := raw.New(k.JSON(benchdata.DefaultSeed, 0, rv), raw.BuildOptions{})
		if err != nil {
			panic(err)
		}
		return o
	}
	cur := o(2)
	return &informer.Change{
		Op: informer.OpUpdated, Resource: r, Key: r.ObjectKey(cur.GetNamespace(), cur.GetName()),
		Object: informer.FromRaw(cur), OldObject: informer.FromRaw(o(1)), Observed: time.Now(),
	}
}

// BenchmarkEventRaw is BenchmarkEvent on the raw cache.
func BenchmarkEventRaw(b *testing.B) {
	for _, k := range benchdata.Kinds {
		b.Run(k.Name, func(b *testing.B) {
			c := benchRawChange(k)
			ev, err := encoding.New(c)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(ev.Data())))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encoding.New(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
