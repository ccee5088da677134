//go:build e2e

package kafka_test

import (
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/kafkatest"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// Enqueue → broker ack on real Apache Kafka (acks=all).
func BenchmarkLatencyRealKafka(b *testing.B) {
	k := kafkatest.Start(b, nil)
	for _, rate := range []int{200, 1000} {
		b.Run(rateName(rate), func(b *testing.B) {
			s, _ := newSink(b, k.Addr, 3, nil)
			sinktest.Latency(b, s, rate, 3*time.Second)
		})
	}
}
