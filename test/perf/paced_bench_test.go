package perf

import (
	"context"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/procs"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// pacedRate is the event rate BenchmarkPipelinePaced releases events at:
// KUBEWIRE_BENCH_RATE, default 200/s, a real cluster's trickle rather than
// a flood.
func pacedRate(tb testing.TB) int {
	s := os.Getenv("KUBEWIRE_BENCH_RATE")
	if s == "" {
		return 200
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		tb.Fatalf("KUBEWIRE_BENCH_RATE=%q: want a positive number of events per second", s)
	}
	return n
}

// BenchmarkPipelinePaced is BenchmarkPipelineRaw with the events released at
// a fixed rate (pacedRate) instead of as fast as the pipeline takes them.
// At a trickle a batch holds about one event, so every per-event hand-off
// and wake-up costs in full, as in a real cluster; compare its cpu-µs/event
// with the saturated benchmark's for the same sink and object. One op is one
// MODIFIED event acknowledged by the sink; b.N events take b.N/rate seconds.
func BenchmarkPipelinePaced(b *testing.B) {
	rate := pacedRate(b)
	for _, bk := range brokers {
		for _, k := range []benchdata.Kind{benchdata.ConfigMaps, benchdata.Pods} {
			b.Run(bk.name+"/"+k.Name, func(b *testing.B) { benchPaced(b, bk, k, rate, false) })
		}
	}
}

// BenchmarkPipelinePacedAdaptive is BenchmarkPipelinePaced with GOMAXPROCS
// adapted to the load as `kubewire run` adapts it (internal/base/procs): at a
// trickle the process runs on one P. The adapter looks once a second, so
// the first second of a run is at the default; use -benchtime of several
// seconds' worth of events (2000x is 10 s at 200/s).
func BenchmarkPipelinePacedAdaptive(b *testing.B) {
	rate := pacedRate(b)
	for _, bk := range brokers {
		for _, k := range []benchdata.Kind{benchdata.ConfigMaps, benchdata.Pods} {
			b.Run(bk.name+"/"+k.Name, func(b *testing.B) { benchPaced(b, bk, k, rate, true) })
		}
	}
}

func benchPaced(b *testing.B, bk brokerKind, k benchdata.Kind, rate int, adaptProcs bool) {
	rp := replayed[k.Name]
	window := rp.window
	child := replayInChild(b)
	if child {
		// The rate, not credit, holds the stream back, so a replay in a
		// child gets no credit: returning it would cost this process a
		// pipe write per event, which a real apiserver does not ask for.
		window = math.MaxInt
	}
	replay := newReplay(b, k, benchdata.DefaultSeed, rp.objects, window)
	defer replay.Close()
	p := startPipeline(b, k, replay.URL(), bk.new(b), config.CacheRaw)
	defer p.stop()
	if !child {
		p.ack.setOnAck(func(evs []*encoding.Event, _ time.Time) { replay.Ack(countUpdates(evs)) })
	}
	select {
	case <-p.ack.synced:
	case <-time.After(2 * time.Minute):
		b.Fatal("the initial snapshot was not acknowledged within 2m")
	}
	if adaptProcs {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			procs.Adapt(ctx, quiet)
		}()
		defer func() { stop(); <-done }()
	}
	p.ack.expect(int64(b.N))
	every := time.Second / time.Duration(rate)
	timeout := time.Duration(b.N)*every + 2*time.Minute
	measureWith(b, replay, p, timeout, func() {
		if c, ok := replay.(*childReplay); ok {
			// The ticker runs in the child, so this process wakes for
			// the events alone, as with a real apiserver.
			c.Pace(every, b.N)
			return
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for range b.N {
			replay.Play(1)
			<-t.C
		}
	})
	b.ReportMetric(float64(rate), "events/s-asked")
}

// BenchmarkIdleWake is the floor under BenchmarkPipelinePaced's figures: a
// goroutine that wakes at the paced rate and does nothing else. Between
// wakes the process is idle, as kubewire is at a trickle, so each wake pays
// the runtime's return from the netpoller, sysmon's wake and whatever the
// kernel and hypervisor charge for leaving an idle CPU, none of which any
// work on kubewire's path can remove. A paced event wakes kubewire at least
// twice, for the watch data and for the broker's answer a little later:
// "twice" wakes again 200µs after each tick, as that answer does.
func BenchmarkIdleWake(b *testing.B) {
	every := time.Second / time.Duration(pacedRate(b))
	for _, c := range []struct {
		name  string
		again time.Duration
	}{{"once", 0}, {"twice", 200 * time.Microsecond}} {
		b.Run(c.name, func(b *testing.B) {
			t := time.NewTicker(every)
			defer t.Stop()
			again := time.NewTimer(time.Hour)
			defer again.Stop()
			<-t.C
			cpu0, cs0 := cpuTime(), contextSwitches()
			b.ResetTimer()
			for range b.N {
				<-t.C
				if c.again > 0 {
					again.Reset(c.again)
					<-again.C
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(contextSwitches()-cs0)/float64(b.N), "ctxsw/op")
		})
	}
}
