//go:build e2e

package perf

import (
	"testing"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/sinks"
)

// BenchmarkE2EPipelineRealJetStream is BenchmarkPipeline into a nats-server
// process with JetStream, the raw cache. BenchmarkPipeline's jetstream
// runs the server in the test process, where its CPU (a quarter of the
// total for small objects) counts as kubewire's; here, as with real
// Kafka, cpu-µs/event is kubewire's and the replay server's alone.
//
//	go test -tags e2e -run '^$' -bench E2EPipelineRealJetStream -benchmem ./test/perf
func BenchmarkE2EPipelineRealJetStream(b *testing.B) {
	srv := natstest.Start(b)
	real := brokerKind{"jetstream", func(tb testing.TB) sinks.Sink { return jetStreamSink(tb, srv.URL()) }}
	for _, k := range benchdata.Kinds {
		b.Run(config.CacheRaw+"/"+k.Name, func(b *testing.B) { benchPipeline(b, real, k, config.CacheRaw) })
	}
}
