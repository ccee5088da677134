package perf

import (
	"runtime"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/benchdata"
)

func countUpdates(evs []*event.Event) int {
	n := 0
	for _, ev := range evs {
		if ev.Type() == encoding.TypeUpdated {
			n++
		}
	}
	return n
}

// replayed is how many distinct objects each kind's stream cycles through,
// and how many events may be unacknowledged at once (below the dispatcher's
// default buffer of 10,000, so nothing is conflated).
var replayed = map[string]struct{ objects, window int }{
	"pod":       {1000, 2000},
	"configmap": {1000, 2000},
	"widget":    {100, 200},
}

// BenchmarkPipeline replays a recorded watch stream through the real
// client-go informer (HTTP, JSON decoding, the managedFields transform, the
// cache), kubewire's listener, dispatcher and encoding, and a sink. One op is
// one MODIFIED event acknowledged by the sink. The initial list is delivered
// before the timer starts.
//
// cpu-µs/event is the CPU time of the whole test process: with kfake and
// jetstream that includes the in-process broker and the replay server. The
// discard sink shows kubewire's own share.
func BenchmarkPipeline(b *testing.B) {
	for _, bk := range brokers {
		for _, k := range benchdata.Kinds {
			b.Run(bk.name+"/"+k.Name, func(b *testing.B) {
				benchPipeline(b, bk, k)
			})
		}
	}
}

func benchPipeline(b *testing.B, bk brokerKind, k benchdata.Kind) {
	rp := replayed[k.Name]
	replay := benchdata.NewReplay(k, benchdata.DefaultSeed, rp.objects, rp.window)
	defer replay.Close()
	p := startPipeline(b, k, replay.URL(), bk.new(b))
	defer p.stop()
	p.ack.setOnAck(func(evs []*event.Event, _ time.Time) { replay.Ack(countUpdates(evs)) })
	select {
	case <-p.ack.synced:
	case <-time.After(2 * time.Minute):
		b.Fatal("the initial snapshot was not acknowledged within 2m")
	}
	p.ack.expect(int64(b.N))

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
