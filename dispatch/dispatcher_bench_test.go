package dispatch_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// discardSink acknowledges every write at once and closes done when the
// target number of events has been acknowledged, so the benchmark waits for
// delivery without polling.
type discardSink struct {
	acked  atomic.Int64
	target int64
	done   chan struct{}
}

func (s *discardSink) Connect(context.Context) error { return nil }
func (s *discardSink) Close(context.Context) error   { return nil }
func (s *discardSink) Write(_ context.Context, evs []*encoding.Event) error {
	if s.acked.Add(int64(len(evs))) == s.target {
		close(s.done)
	}
	return nil
}

// BenchmarkDispatch is the dispatcher stage: Enqueue, sharding by key,
// batching, and the Write call into a sink that acknowledges at once. The
// CloudEvents are built before the timer starts (an Item builds its event
// once and keeps it), so only the dispatcher's own cost is measured. The
// buffer is large enough that nothing is conflated.
func BenchmarkDispatch(b *testing.B) {
	const objects = 1000
	k := benchdata.ConfigMaps
	r := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	items := make([]*dispatch.Item, objects)
	for i := range items {
		u := k.Cached(benchdata.DefaultSeed, i, 2)
		items[i] = dispatch.NewItem(&informer.Change{Op: informer.OpUpdated, Resource: r, Key: r.ObjectKey(u.GetNamespace(), u.GetName()), Object: informer.FromUnstructured(u), Observed: time.Now()})
		if _, err := items[i].Event(); err != nil {
			b.Fatal(err)
		}
	}
	sink := &discardSink{target: int64(b.N), done: make(chan struct{})}
	d := dispatch.NewDispatcher("bench", sink, dispatch.Options{BufferEvents: b.N + 1, Logger: slog.New(slog.DiscardHandler)})
	d.Start()
	defer d.Close(context.Background())
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d.Enqueue(items[i%objects])
	}
	<-sink.done
	b.StopTimer()
}
