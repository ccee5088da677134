//go:build e2e

package perf

import (
	"testing"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/sinks"
)

// BenchmarkE2EPipelineRealKafka is BenchmarkPipeline into a real Apache
// Kafka broker, with each cache. The broker is a separate process, so cpu-µs/event here is
// kubewire's (and the replay server's) alone. One broker serves every
// sub-benchmark; it takes a while to start.
//
//	go test -tags e2e -run '^$' -bench E2EPipeline -benchmem ./test/perf
func BenchmarkE2EPipelineRealKafka(b *testing.B) {
	broker := kafkatest.Start(b, nil)
	real := brokerKind{"kafka", func(tb testing.TB) sinks.Sink { return kafkaSink(tb, broker.Addr) }}
	for _, cache := range []string{config.CacheRaw, config.CacheUnstructured} {
		for _, k := range benchdata.Kinds {
			b.Run(cache+"/"+k.Name, func(b *testing.B) { benchPipeline(b, real, k, cache) })
		}
	}
}
