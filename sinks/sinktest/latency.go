package sinktest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks"
)

// Latency measures, for an adapter, the time from Dispatcher.Enqueue to the
// broker's acknowledgement, for about 10 KB events of distinct objects
// enqueued at rate per second for d. It reports p50, p99 and max in
// milliseconds and the rate achieved. The sink must be connectable; the
// caller provides and cleans up the broker.
func Latency(b *testing.B, s sinks.Sink, rate int, d time.Duration) {
	b.Helper()
	tk := &timedSink{Sink: s, enqueued: map[string]time.Time{}}
	disp := dispatch.NewDispatcher("latency", tk, dispatch.Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	disp.Start()
	filler := strings.Repeat("x", 10<<10)
	n := rate * int(d/time.Second)
	items := make([]*dispatch.Item, n)
	for i := range items {
		u := Object(nsOf(i), "obj-"+strconv.Itoa(i), i+1)
		u.Object["spec"].(map[string]any)["filler"] = filler
		items[i] = dispatch.NewItem(ChangeOf(informer.OpUpdated, u))
		// Build the CloudEvent now: the measurement is of delivery, not of
		// encoding (which has benchmarks of its own).
		if _, err := items[i].Event(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for _, it := range items {
		<-tick.C
		ev, _ := it.Event()
		tk.mark(ev.ID())
		disp.Enqueue(it)
	}
	tick.Stop()
	sent := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if left := disp.Close(ctx); left > 0 {
		b.Fatalf("%d events were not acknowledged within a minute", left)
	}
	b.StopTimer()
	lat := tk.latencies()
	if len(lat) < n {
		b.Fatalf("%d of %d events acknowledged", len(lat), n)
	}
	slices.Sort(lat)
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(float64(n)/sent.Seconds(), "events/s")
}

// timedSink records when each event was enqueued and acknowledged.
type timedSink struct {
	sinks.Sink
	mu       sync.Mutex
	enqueued map[string]time.Time
	lat      []time.Duration
}

func (t *timedSink) mark(id string) {
	t.mu.Lock()
	t.enqueued[id] = time.Now()
	t.mu.Unlock()
}

func (t *timedSink) Write(ctx context.Context, evs []*encoding.Event) error {
	err := t.Sink.Write(ctx, evs)
	var failed func(i int) bool
	if err != nil {
		// Declared here, so that a Write that succeeds allocates nothing
		// for it: the benchmark counts allocations.
		var be *sinks.BatchError
		if !errors.As(err, &be) || be.Len() != len(evs) {
			return err
		}
		failed = func(i int) bool { return be.Err(i) != nil }
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, ev := range evs {
		if failed != nil && failed(i) {
			continue
		}
		if at, ok := t.enqueued[ev.ID()]; ok {
			t.lat = append(t.lat, now.Sub(at))
			delete(t.enqueued, ev.ID())
		}
	}
	return err
}

func (t *timedSink) latencies() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.lat)
}
