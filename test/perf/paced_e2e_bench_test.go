//go:build e2e

package perf

import (
	"testing"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/sinks"
)

// BenchmarkE2EPipelinePacedReal is BenchmarkPipelinePacedAdaptive into a
// real Kafka broker and a nats-server process. In BenchmarkPipelinePaced
// the in-process broker's wake-ups count as kubewire's, which at a trickle
// is most of the cost; here only the replayed apiserver, which plays the
// events, shares the process with kubewire, and KUBEWIRE_BENCH_REPLAY=process
// moves it out too.
//
//	go test -tags e2e -run '^$' -bench E2EPipelinePacedReal -benchtime 2000x ./test/perf
func BenchmarkE2EPipelinePacedReal(b *testing.B) {
	rate := pacedRate(b)
	broker := kafkatest.Start(b, nil)
	srv := natstest.Start(b)
	for _, bk := range []brokerKind{
		{"kafka", func(tb testing.TB) sinks.Sink { return kafkaSink(tb, broker.Addr) }},
		{"jetstream", func(tb testing.TB) sinks.Sink { return jetStreamSink(tb, srv.URL()) }},
	} {
		for _, k := range []benchdata.Kind{benchdata.ConfigMaps, benchdata.Pods} {
			b.Run(bk.name+"/"+k.Name, func(b *testing.B) { benchPaced(b, bk, k, rate, true) })
		}
	}
}
