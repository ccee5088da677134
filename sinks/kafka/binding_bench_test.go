package kafka_test

import (
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/benchdata"
	"github.com/kubewire/kubewire/sinks/kafka"
)

// benchEvent is the CloudEvent of an update of object 0 of k.
func benchEvent(b *testing.B, k benchdata.Kind) *event.Event {
	b.Helper()
	r := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	u := k.Cached(benchdata.DefaultSeed, 0, 2)
	ev, err := encoding.Event(&informer.Change{Op: informer.OpUpdated, Resource: r, Key: r.ObjectKey(u.GetNamespace(), u.GetName()), Object: u, Observed: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	return ev
}

// BenchmarkEncodeMessage is the Kafka binding stage: a CloudEvent to a
// kafka-go message (headers, key and value), in both content modes.
func BenchmarkEncodeMessage(b *testing.B) {
	for _, mode := range []struct {
		name       string
		structured bool
	}{{"binary", false}, {"structured", true}} {
		for _, k := range benchdata.Kinds {
			b.Run(mode.name+"/"+k.Name, func(b *testing.B) {
				ev := benchEvent(b, k)
				b.SetBytes(int64(len(ev.Data())))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := kafka.EncodeMessage(ev, mode.structured); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
