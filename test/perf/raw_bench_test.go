package perf

import (
	"encoding/json"
	"io"
	"runtime"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/sinks/kafka"
)

// BenchmarkPipelineRaw is BenchmarkPipeline with cache: raw (the default).
func BenchmarkPipelineRaw(b *testing.B) {
	for _, bk := range brokers {
		for _, k := range benchdata.Kinds {
			b.Run(bk.name+"/"+k.Name, func(b *testing.B) { benchPipeline(b, bk, k, config.CacheRaw) })
		}
	}
}

// measure plays b.N events at once and reports what BenchmarkPipeline
// reports.
func measure(b *testing.B, replay replayServer, p *pipeline) {
	measureWith(b, replay, p, 10*time.Minute, func() { replay.Play(b.N) })
}

// measureWith runs play, which releases b.N events, waits up to timeout for
// all of them to be acknowledged, and reports the pipeline's metrics.
func measureWith(b *testing.B, replay replayServer, p *pipeline, timeout time.Duration, play func()) {
	// The child's CPU is read before and after this process's, so the
	// reading's round trip does not count as kubewire's.
	rcpu := startReplayCPU(b, replay)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime()
	cs0 := contextSwitches()
	b.ReportAllocs()
	b.SetBytes(int64(replay.FrameBytes()))
	b.ResetTimer()
	start := time.Now()
	play()
	select {
	case <-p.ack.done:
	case <-time.After(timeout):
		b.Fatalf("only %d of %d events acknowledged within %s", p.ack.updates.Load(), b.N, timeout)
	}
	reportPipeline(b, start, cpu0, &before)
	b.ReportMetric(float64(contextSwitches()-cs0)/float64(b.N), "ctxsw/event")
	rcpu.report(b)
}

// loopReader replays a recorded watch stream forever.
type loopReader struct {
	b   []byte
	off int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := copy(p, r.b[r.off:])
	r.off = (r.off + n) % len(r.b)
	return n, nil
}

// BenchmarkRawPathVsJSONValid measures issue 9's CPU target: kubewire's own
// work per watch event on the raw path, as a multiple of one json.Valid pass
// over the object's bytes as served (x-json.Valid, the target is at most 2).
//
// One op is one MODIFIED event: read from an in-memory watch stream by
// raw.WatchDecoder (framing, validation, raw.New with the managedFields
// cut), turned into the Change the listener hands on and into the
// CloudEvent every sink shares (encoding.Event). ns/op, B/op and allocs/op
// are that path alone; json.Valid-ns/op is the reference pass. The times
// are medians per event, not means (see the timed loop).
//
// Not in the path: HTTP, client-go's reflector, FIFO, indexer and listener
// queue (BenchmarkPipelineRaw has them), kubewire's update suppression (one
// comparison of the old and new bytes), and the broker binding. The binding
// turns the shared event into the broker client's message and is paid per
// sink, so it counts as the broker client; binding-ns/op shows what the
// Kafka binary-mode binding costs on top.
func BenchmarkRawPathVsJSONValid(b *testing.B) {
	// Distinct objects, so the bytes are not all in cache, and a warm-up of
	// as many events before timing, so -benchtime 1x runs quickly but does
	// not time the decoder's first buffer.
	const objects = 64
	for _, k := range benchdata.Kinds {
		b.Run(k.Name, func(b *testing.B) {
			res := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
			served := make([][]byte, objects)
			var stream []byte
			for i := range served {
				served[i] = k.JSON(benchdata.DefaultSeed, i, int64(1000+i))
				stream = append(append(append(stream, `{"type":"MODIFIED","object":`...), served[i]...), "}\n"...)
			}
			dec := raw.NewWatchDecoder(io.NopCloser(&loopReader{b: stream}), raw.BuildOptions{})
			prev := make([]*raw.Object, objects)
			// The changes are kept, as the dispatcher keeps them, so that
			// they are allocated as in the pipeline.
			changes := make([]*informer.Change, objects)
			evs := make([]*encoding.Event, objects)
			step := func(i int) {
				typ, obj, err := dec.Decode()
				if err != nil || typ != watch.Modified {
					b.Fatalf("decode: %v %v", typ, err)
				}
				o := obj.(*raw.Object)
				c := &informer.Change{
					Op: informer.OpUpdated, Resource: res, Key: res.ObjectKey(o.GetNamespace(), o.GetName()),
					Object: informer.FromRaw(o), OldObject: informer.FromRaw(prev[i%objects]), Observed: time.Now(),
				}
				prev[i%objects], changes[i%objects] = o, c
				if evs[i%objects], err = encoding.New(c); err != nil {
					b.Fatal(err)
				}
			}
			for i := range objects {
				step(i)
				if !json.Valid(served[i]) {
					b.Fatal("served object is not valid JSON")
				}
			}
			// Allocations are counted over a pass of their own, because
			// the binding in the timed loop allocates too.
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			for i := range objects {
				step(objects + i)
			}
			runtime.ReadMemStats(&m1)

			// The three are timed event by event, taking turns, and
			// compared by their medians: the machine is shared, and an event
			// during which the thread was descheduled takes milliseconds.
			valid := make([]time.Duration, b.N)
			path := make([]time.Duration, b.N)
			binding := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if !json.Valid(served[i%objects]) {
					b.Fatal("served object is not valid JSON")
				}
				t1 := time.Now()
				step(2*objects + i)
				t2 := time.Now()
				kafka.EncodeMessage(evs[i%objects], false)
				t3 := time.Now()
				valid[i], path[i], binding[i] = t1.Sub(t0), t2.Sub(t1), t3.Sub(t2)
			}
			b.StopTimer()

			b.ReportMetric(float64(medianDuration(path)), "ns/op")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/objects, "allocs/op")
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/objects, "B/op")
			b.ReportMetric(float64(medianDuration(valid)), "json.Valid-ns/op")
			b.ReportMetric(float64(medianDuration(binding)), "binding-ns/op")
			b.ReportMetric(float64(medianDuration(path))/float64(medianDuration(valid)), "x-json.Valid")
		})
	}
}

// medianDuration sorts d and returns its median.
func medianDuration(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
