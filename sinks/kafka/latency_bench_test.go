package kafka_test

import (
	"testing"
	"time"

	"github.com/kubewire/kubewire/sinks/sinktest"
)

// Enqueue → broker ack through the dispatcher, for 10 KB events, on kfake.
// The real-Kafka variant is in latency_e2e_bench_test.go.
func BenchmarkLatencyKfake(b *testing.B) {
	for _, rate := range []int{200, 1000} {
		b.Run(rateName(rate), func(b *testing.B) {
			f := startFake(b)
			s, _ := newSink(b, f.addr(), 3, nil)
			sinktest.Latency(b, s, rate, 3*time.Second)
		})
	}
}

func rateName(rate int) string {
	if rate >= 1000 {
		return "1000-per-s"
	}
	return "200-per-s"
}
