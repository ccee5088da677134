package consumer_test

import (
	"runtime"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// benchEvent is the added event of object i of kind k at rv, as kubewire
// sends it in payload mode full.
func benchEvent(k benchdata.Kind, i int, rv int64) *event.Event {
	u := k.Object(1, i, rv)
	e := event.New()
	e.SetType(encoding.TypeUpdated)
	e.SetID(string(u.GetUID()) + "/" + u.GetResourceVersion() + "/updated")
	e.SetExtension(encoding.ExtPartitionKey, k.GVR.Resource+"/"+u.GetNamespace()+"/"+u.GetName())
	e.SetExtension(encoding.ExtNamespace, u.GetNamespace())
	e.SetExtension(encoding.ExtName, u.GetName())
	e.SetExtension(encoding.ExtUID, string(u.GetUID()))
	e.SetExtension(encoding.ExtResourceVersion, u.GetResourceVersion())
	e.DataEncoded = k.JSON(1, i, rv)
	return &e
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// memoryPerJSONByte applies n objects of kind k and returns the heap the
// view took divided by the size of the objects' JSON.
func memoryPerJSONByte(k benchdata.Kind, n int) float64 {
	before := heap()
	v := consumer.NewView(consumer.Options{})
	jsonBytes := 0
	for i := range n {
		ev := benchEvent(k, i, 100)
		jsonBytes += len(ev.Data())
		v.Apply(consumer.Position{Partition: "p", Offset: int64(i)}, ev)
	}
	after := heap()
	runtime.KeepAlive(v)
	return float64(after-before) / float64(jsonBytes)
}

func TestTheViewHoldsAnObjectInAtMostOnePointThreeTimesItsJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	for _, k := range []benchdata.Kind{benchdata.ConfigMaps, benchdata.Pods} {
		if r := memoryPerJSONByte(k, 1000); r > 1.3 {
			t.Errorf("%s: the view takes %.2f× the objects' JSON, want at most 1.3×", k.Name, r)
		} else {
			t.Logf("%s: %.2f× the objects' JSON", k.Name, r)
		}
	}
}

func BenchmarkViewApply(b *testing.B) {
	for _, k := range []benchdata.Kind{benchdata.ConfigMaps, benchdata.Pods} {
		b.Run(k.Name, func(b *testing.B) {
			const objects = 1000
			evs := make([]*event.Event, 0, 4*objects)
			for rv := range int64(4) {
				for i := range objects {
					evs = append(evs, benchEvent(k, i, 100+rv))
				}
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				v := consumer.NewView(consumer.Options{})
				for j, ev := range evs {
					v.Apply(consumer.Position{Partition: "p", Offset: int64(j)}, ev)
				}
			}
			b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(memoryPerJSONByte(k, objects), "heap/json")
		})
	}
}
