//go:build e2e

package kafka_test

import (
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// Enqueue → broker ack on real Apache Kafka (acks=all), as an idempotent
// producer (the default) and without, to show what idempotence costs.
func BenchmarkLatencyRealKafka(b *testing.B) {
	k := kafkatest.Start(b, nil)
	for _, rate := range []int{200, 1000} {
		for _, idem := range []bool{true, false} {
			name := rateName(rate) + "/idempotent"
			if !idem {
				name = rateName(rate) + "/plain"
			}
			b.Run(name, func(b *testing.B) {
				s, _ := newSink(b, k.Addr, 3, func(c *kafka.Config) { c.Idempotent = &idem })
				sinktest.Latency(b, s, rate, 3*time.Second)
			})
		}
	}
}
