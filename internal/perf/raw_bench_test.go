package perf

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/benchdata"
	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/sinks"
)

// BenchmarkPipelineRaw is BenchmarkPipeline with cache: raw (the default).
func BenchmarkPipelineRaw(b *testing.B) {
	for _, bk := range brokers {
		for _, k := range benchdata.Kinds {
			b.Run(bk.name+"/"+k.Name, func(b *testing.B) { benchRawPipeline(b, bk, k) })
		}
	}
}

func benchRawPipeline(b *testing.B, bk brokerKind, k benchdata.Kind) {
	rp := replayed[k.Name]
	replay := benchdata.NewReplay(k, benchdata.DefaultSeed, rp.objects, rp.window)
	defer replay.Close()
	p := startRawPipeline(b, k, replay.URL(), bk.new(b))
	defer p.stop()
	p.ack.setOnAck(func(evs []*event.Event, _ time.Time) { replay.Ack(countUpdates(evs)) })
	select {
	case <-p.ack.synced:
	case <-time.After(2 * time.Minute):
		b.Fatal("the initial snapshot was not acknowledged within 2m")
	}
	p.ack.expect(int64(b.N))
	measure(b, replay, p)
}

// startRawPipeline is startPipeline with the resource's cache set to raw.
func startRawPipeline(tb testing.TB, k benchdata.Kind, apiserver string, sink sinks.Sink) *pipeline {
	tb.Helper()
	cfg := validated(tb, k, config.Sink{Name: "out", Type: config.SinkTypeStdout})
	res := cfg.Resources[0]
	res.Cache = config.CacheRaw
	rc := &rest.Config{Host: apiserver, QPS: cfg.Client.QPS, Burst: cfg.Client.Burst}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		tb.Fatal(err)
	}
	rawREST, err := raw.NewRESTClient(rc)
	if err != nil {
		tb.Fatal(err)
	}
	p := &pipeline{ack: newAcker(sink), ran: make(chan struct{})}
	p.d = sinks.NewDispatcher("out", p.ack, sinks.Options{
		Shards: cfg.Dispatch.Shards, BufferEvents: cfg.Dispatch.BufferEvents, BatchSize: cfg.Dispatch.BatchSize, Logger: quiet,
	})
	w := informer.NewWatcher(informer.Options{
		Cluster: cfg.Cluster, Resource: res, Dynamic: dyn, REST: rawREST, Mapper: mapperFor(k),
		Out: fanout{p.d}, Logger: quiet,
	})
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	p.d.Start()
	go func() {
		defer close(p.ran)
		w.Run(ctx)
	}()
	return p
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
