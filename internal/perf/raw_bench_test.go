package perf

import (
	"runtime"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/benchdata"
	"github.com/kubewire/kubewire/internal/config"
)

// BenchmarkPipelineRaw is BenchmarkPipeline with cache: raw (the default).
func BenchmarkPipelineRaw(b *testing.B) {
	for _, bk := range brokers {
		for _, k := range benchdata.Kinds {
			b.Run(bk.name+"/"+k.Name, func(b *testing.B) { benchPipeline(b, bk, k, config.CacheRaw) })
		}
	}
}

// measure plays b.N events and reports what BenchmarkPipeline reports.
func measure(b *testing.B, replay *benchdata.Replay, p *pipeline) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.SetBytes(int64(replay.FrameBytes()))
	b.ResetTimer()
	start := time.Now()
	replay.Play(b.N)
	select {
	case <-p.ack.done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("only %d of %d events acknowledged within 10m", p.ack.updates.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&after)
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/event")
}
