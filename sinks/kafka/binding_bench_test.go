package kafka_test

import (
	"testing"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// BenchmarkEncodeMessage is the Kafka binding stage: a CloudEvent to a
// kafka-go message (headers, key and value), in both content modes.
func BenchmarkEncodeMessage(b *testing.B) {
	for _, mode := range []struct {
		name       string
		structured bool
	}{{"binary", false}, {"structured", true}} {
		for _, k := range benchdata.Kinds {
			b.Run(mode.name+"/"+k.Name, func(b *testing.B) {
				ev := sinktest.BenchEvent(b, k)
				b.SetBytes(int64(len(ev.Data())))
				b.ReportAllocs()
				for b.Loop() {
					kafka.EncodeMessage(ev, mode.structured)
				}
			})
		}
	}
}
