package perf

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// scalingCounts are the numbers of resources and of sinks BenchmarkScaling
// compares.
var scalingCounts = []int{1, 2, 4}

// BenchmarkScaling shows how the pipeline's cost grows with the number of
// resources watched and with the number of sinks, on the replayed Pod
// stream of BenchmarkPipeline with the default (raw) cache.
//
// resources=R runs R Pod resources, each its own informer on its own
// replayed apiserver (a different seed, so distinct objects), into one
// discarding sink through one dispatcher, as the app wires resources that
// share a sink. One op is one MODIFIED event; the events are spread evenly
// over the resources. heap-B/cached-obj is the live heap once every
// resource has published its snapshot, minus the live heap just before the
// informers started, divided by the objects cached (1,000 per resource).
//
// sinks=S/<sink> runs one Pod resource fanned out to S sinks, each with its
// own dispatcher and, for kfake, its own in-process broker. One op is one
// change, acknowledged by all S sinks.
//
// cpu-µs/event and allocs/event cover the whole test process, as in
// BenchmarkPipeline: the replay servers (unless KUBEWIRE_BENCH_REPLAY=process)
// and, for kfake, the brokers too.
//
//	go test -run '^$' -bench Scaling -benchtime 3000x ./test/perf
func BenchmarkScaling(b *testing.B) {
	for _, r := range scalingCounts {
		b.Run(fmt.Sprintf("resources=%d", r), func(b *testing.B) { benchResources(b, r) })
	}
	for _, s := range scalingCounts {
		for _, bk := range brokers {
			if bk.name == "jetstream" {
				continue // one broker type in-process is enough to show the slope
			}
			b.Run(fmt.Sprintf("sinks=%d/%s", s, bk.name), func(b *testing.B) { benchSinks(b, bk, s) })
		}
	}
}

func benchResources(b *testing.B, resources int) {
	k := benchdata.Pods
	rp := replayed[k.Name]
	replays := make([]replayServer, resources)
	owner := map[string]int{} // subject (namespace/name) -> resource
	for r := range replays {
		seed := benchdata.DefaultSeed + uint64(r)
		replays[r] = newReplay(b, k, seed, rp.objects, rp.window)
		defer replays[r].Close()
		for i := range rp.objects {
			m := k.New(seed, i)["metadata"].(map[string]any)
			owner[m["namespace"].(string)+"/"+m["name"].(string)] = r
		}
	}
	if len(owner) != resources*rp.objects {
		b.Fatalf("%d distinct objects over %d resources, want %d", len(owner), resources, resources*rp.objects)
	}

	ack := newAcker(discard{})
	var snapshots atomic.Int64
	synced := make(chan struct{})
	ack.setOnAck(func(evs []*encoding.Event, _ time.Time) {
		credit := make([]int, resources)
		for _, ev := range evs {
			switch ev.Type() {
			case encoding.TypeUpdated:
				credit[owner[ev.Subject()]]++
			case encoding.TypeSnapshotCompleted:
				if snapshots.Add(1) == int64(resources) {
					close(synced)
				}
			}
		}
		for r, n := range credit {
			if n > 0 {
				replays[r].Ack(n)
			}
		}
	})
	d := newDispatcher(b, "out", ack)
	d.Start()
	defer closeDispatchers(d)

	base := heapAfterGC()
	for _, rp := range replays {
		cancel, ran := startWatcher(b, k, rp.URL(), fanout{d}, config.CacheRaw)
		defer func() { cancel(); <-ran }()
	}
	select {
	case <-synced:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d snapshots acknowledged within 2m", snapshots.Load(), resources)
	}
	heap := heapAfterGC()

	ack.expect(int64(b.N))
	measureScaling(b, replays, func() {
		for r, rp := range replays {
			n := b.N / resources
			if r < b.N%resources {
				n++
			}
			rp.Play(n)
		}
	}, []*acker{ack})
	b.ReportMetric(float64(int64(heap)-int64(base))/float64(resources*rp.objects), "heap-B/cached-obj")
}

func benchSinks(b *testing.B, bk brokerKind, n int) {
	k := benchdata.Pods
	rp := replayed[k.Name]
	replay := newReplay(b, k, benchdata.DefaultSeed, rp.objects, rp.window)
	defer replay.Close()

	// The stream gets credit back only for what every sink acknowledged.
	var mu sync.Mutex
	acked := make([]int64, n)
	var credited int64
	ackers := make([]*acker, n)
	out := make(fanout, n)
	for s := range n {
		ackers[s] = newAcker(bk.new(b))
		ackers[s].setOnAck(func(evs []*encoding.Event, _ time.Time) {
			u := countUpdates(evs)
			if u == 0 {
				return
			}
			mu.Lock()
			acked[s] += int64(u)
			least := acked[0]
			for _, a := range acked[1:] {
				least = min(least, a)
			}
			give := least - credited
			credited = least
			mu.Unlock()
			if give > 0 {
				replay.Ack(int(give))
			}
		})
		out[s] = newDispatcher(b, fmt.Sprintf("out-%d", s), ackers[s])
		out[s].Start()
	}
	defer closeDispatchers(out...)

	cancel, ran := startWatcher(b, k, replay.URL(), out, config.CacheRaw)
	defer func() { cancel(); <-ran }()
	for _, a := range ackers {
		select {
		case <-a.synced:
		case <-time.After(2 * time.Minute):
			b.Fatal("the initial snapshot was not acknowledged by every sink within 2m")
		}
		a.expect(int64(b.N))
	}
	measureScaling(b, []replayServer{replay}, func() { replay.Play(b.N) }, ackers)
}

// closeDispatchers drains ds; it runs after the informers stopped.
func closeDispatchers(ds ...*dispatch.Dispatcher) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range ds {
		d.Close(ctx)
	}
}

// measureScaling is measure for several replays or sinks: play releases
// b.N events in all, and the op ends when every acker has seen its b.N.
func measureScaling(b *testing.B, replays []replayServer, play func(), ackers []*acker) {
	rcpu := startReplayCPU(b, replays...)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.SetBytes(int64(replays[0].FrameBytes()))
	b.ResetTimer()
	start := time.Now()
	play()
	deadline := time.After(10 * time.Minute)
	for _, a := range ackers {
		select {
		case <-a.done:
		case <-deadline:
			b.Fatalf("only %d of %d events acknowledged within 10m", a.updates.Load(), b.N)
		}
	}
	reportPipeline(b, start, cpu0, &before)
	rcpu.report(b)
}
