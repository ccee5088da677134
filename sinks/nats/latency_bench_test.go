package nats_test

import (
	"strconv"
	"testing"
	"time"

	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// Enqueue → ack through the dispatcher, for 10 KB events, on an embedded
// nats-server: the PubAck in JetStream mode, the flush in core mode.
func BenchmarkLatency(b *testing.B) {
	for _, mode := range []string{kwnats.ModeJetStream, kwnats.ModeCore} {
		for _, rate := range []int{200, 1000} {
			b.Run(mode+"/"+strconv.Itoa(rate)+"-per-s", func(b *testing.B) {
				br := startBroker(b)
				n := strconv.FormatInt(seq.Add(1), 10)
				cfg := br.sinkConfig(mode)
				cfg.Subject = "lat" + n + ".{cluster}.{group}.{version}.{resource}.{namespace}.{name}"
				if mode == kwnats.ModeJetStream {
					cfg.JetStream = &kwnats.JetStream{MaxPending: 256, Stream: &kwnats.Stream{Name: "LAT_" + n}}
				}
				sinktest.Latency(b, newSink(b, "lat-"+n, cfg), rate, 3*time.Second)
			})
		}
	}
}
