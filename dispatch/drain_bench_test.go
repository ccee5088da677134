package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
)

// drainEvents is how many spooled events BenchmarkDrain delivers: the
// issue's figure, about an hour of a busy cluster's changes for one sink.
const drainEvents = 100_000

// rssBytes is the process's resident set size.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// spooledFor fills a spool in dir with n changes of 2 KB ConfigMaps (3,000
// objects, several versions each), as an outage leaves it, and closes it.
func spooledFor(b *testing.B, dir string, opt dispatch.Options, n int) {
	b.Helper()
	k := benchdata.ConfigMaps
	r := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	down := &memsink.Sink{}
	down.SetDown(true)
	d := dispatch.NewDispatcher("drain", down, opt)
	if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 40, Fsync: config.FsyncNever}); err != nil {
		b.Fatal(err)
	}
	d.Start()
	const objects = 3000
	for i := range n {
		u := k.Cached(benchdata.DefaultSeed, i%objects, int64(i/objects+2))
		d.Enqueue(dispatch.NewItem(&informer.Change{Op: informer.OpUpdated, Resource: r,
			Key: r.ObjectKey(u.GetNamespace(), u.GetName()), Object: informer.FromUnstructured(u), Observed: time.Now()}))
	}
	if lost := d.Close(context.Background()); lost != 0 {
		b.Fatalf("%d events neither delivered nor spooled", lost)
	}
}

// BenchmarkDrain delivers a spool of 100k events left by an outage, with the
// default buffer (10,000 events, 32 MiB), into a sink that acknowledges at
// once. It reports events/s and how far the heap and the RSS rose above what
// they were before the drain began: the memory a drain costs, which must stay
// within the buffer plus a margin whatever the spool holds.
//
// In "arrivals", changes keep coming during the drain (a burst of 20,000, as
// a snapshot of a large resource brings), and go behind the spool.
func BenchmarkDrain(b *testing.B) {
	for _, arrivals := range []int{0, 20_000} {
		name := "spool-only"
		if arrivals > 0 {
			name = "arrivals"
		}
		b.Run(name, func(b *testing.B) { benchDrain(b, arrivals) })
	}
}

func benchDrain(b *testing.B, arrivals int) {
	opt := dispatch.Options{BufferBytes: config.DefaultBufferBytes, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	k := benchdata.ConfigMaps
	r := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	var peakHeap, peakRSS, rate float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		spooledFor(b, dir, opt, drainEvents)
		sink := &discardSink{target: int64(drainEvents + arrivals), done: make(chan struct{})}
		live := make([]*dispatch.Item, arrivals)
		for j := range live {
			u := k.Cached(benchdata.DefaultSeed, 3000+j, 2)
			live[j] = dispatch.NewItem(&informer.Change{Op: informer.OpUpdated, Resource: r,
				Key: r.ObjectKey(u.GetNamespace(), u.GetName()), Object: informer.FromUnstructured(u), Observed: time.Now()})
		}
		// The arrivals' objects are in the informer's cache anyway: the
		// baseline holds them, and the rise is what the drain adds.
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap0, rss0 := ms.HeapInuse, rssBytes()

		d := dispatch.NewDispatcher("drain", sink, opt)
		if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 40, Fsync: config.FsyncNever}); err != nil {
			b.Fatal(err)
		}
		var maxHeap, maxRSS atomic.Uint64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > maxHeap.Load() {
					maxHeap.Store(ms.HeapInuse)
				}
				if r := uint64(rssBytes()); r > maxRSS.Load() {
					maxRSS.Store(r)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		start := time.Now()
		b.StartTimer()
		d.Start()
		for _, it := range live {
			d.Enqueue(it)
		}
		live = nil
		<-sink.done
		b.StopTimer()
		took := time.Since(start)
		close(stop)
		<-sampled
		d.Close(context.Background())
		rate = float64(drainEvents+arrivals) / took.Seconds()
		peakHeap = max(peakHeap, float64(maxHeap.Load())-float64(heap0))
		peakRSS = max(peakRSS, float64(maxRSS.Load())-float64(rss0))
	}
	b.ReportMetric(rate, "events/s")
	b.ReportMetric(peakHeap/(1<<20), "heap-rise-MB")
	b.ReportMetric(peakRSS/(1<<20), "rss-rise-MB")
	b.ReportMetric(0, "ns/op")
}
