package perf

import (
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

func countUpdates(evs []*encoding.Event) int {
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
// jetstream that includes the in-process broker, and the replay server
// unless KUBEWIRE_BENCH_REPLAY=process runs it in a child (whose CPU is then
// replay-cpu-µs/event). The discard sink shows kubewire's own share.
func BenchmarkPipeline(b *testing.B) {
	for _, bk := range brokers {
		for _, k := range benchdata.Kinds {
			b.Run(bk.name+"/"+k.Name, func(b *testing.B) {
				benchPipeline(b, bk, k, config.CacheUnstructured)
			})
		}
	}
}

func benchPipeline(b *testing.B, bk brokerKind, k benchdata.Kind, cache string) {
	rp := replayed[k.Name]
	replay := newReplay(b, k, benchdata.DefaultSeed, rp.objects, rp.window)
	defer replay.Close()
	p := startPipeline(b, k, replay.URL(), bk.new(b), cache)
	defer p.stop()
	p.ack.setOnAck(func(evs []*encoding.Event, _ time.Time) { replay.Ack(countUpdates(evs)) })
	select {
	case <-p.ack.synced:
	case <-time.After(2 * time.Minute):
		b.Fatal("the initial snapshot was not acknowledged within 2m")
	}
	p.ack.expect(int64(b.N))
	measure(b, replay, p)
}
