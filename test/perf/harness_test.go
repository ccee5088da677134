package perf

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	natssink "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/stdout"
)

var quiet = slog.New(slog.DiscardHandler)

// acker wraps the sink under test and observes what the broker acknowledged:
// a Write that returns nil is the ack of all its events. It counts live
// updates (closing done when target is reached), notices the end of the
// initial snapshot, and hands each acknowledged batch to onAck.
type acker struct {
	sinks.Sink
	updates  atomic.Int64
	target   atomic.Int64
	done     chan struct{}
	doneOnce sync.Once
	// synced closes at the first snapshot.completed marker; a sink that
	// receives several resources sees one marker per resource.
	synced     chan struct{}
	syncedOnce sync.Once
	// hook is called with every acknowledged batch. It is installed while
	// the sink is already running, hence atomic: use setOnAck.
	hook atomic.Pointer[func(evs []*encoding.Event, at time.Time)]
}

// setOnAck installs f to be called with every acknowledged batch; safe
// while writes are under way.
func (a *acker) setOnAck(f func(evs []*encoding.Event, at time.Time)) { a.hook.Store(&f) }

func newAcker(s sinks.Sink) *acker {
	a := &acker{Sink: s, done: make(chan struct{}), synced: make(chan struct{})}
	a.target.Store(-1)
	return a
}

func (a *acker) Write(ctx context.Context, evs []*encoding.Event) error {
	err := a.Sink.Write(ctx, evs)
	if err != nil {
		// Count what the sink acknowledged of a Write that partly failed:
		// the dispatcher does not write it again.
		var be *sinks.BatchError
		if !errors.As(err, &be) || be.Len() != len(evs) {
			return err
		}
		var ok []*encoding.Event
		for i, ev := range evs {
			if be.Err(i) == nil {
				ok = append(ok, ev)
			}
		}
		evs = ok
	}
	at := time.Now()
	n := 0
	for _, ev := range evs {
		switch ev.Type() {
		case encoding.TypeUpdated:
			n++
		case encoding.TypeSnapshotCompleted:
			a.syncedOnce.Do(func() { close(a.synced) })
		}
	}
	if f := a.hook.Load(); f != nil {
		(*f)(evs, at)
	}
	if n > 0 {
		if got := a.updates.Add(int64(n)); got == a.target.Load() {
			a.doneOnce.Do(func() { close(a.done) })
		}
	}
	return err
}

// expect arms done to close after n live updates in total.
func (a *acker) expect(n int64) {
	a.target.Store(n)
	if a.updates.Load() >= n {
		a.doneOnce.Do(func() { close(a.done) })
	}
}

// discard is a sink that acknowledges at once: the pipeline without a broker.
type discard struct{}

func (discard) Connect(context.Context) error                  { return nil }
func (discard) Write(context.Context, []*encoding.Event) error { return nil }
func (discard) Close(context.Context) error                    { return nil }

// brokerKind names a sink under test and builds it, starting its broker.
type brokerKind struct {
	name string
	new  func(tb testing.TB) sinks.Sink
}

var brokers = []brokerKind{
	{"discard", func(testing.TB) sinks.Sink { return discard{} }},
	{"kfake", func(tb testing.TB) sinks.Sink { return kafkaSink(tb, startKfake(tb)) }},
	{"jetstream", func(tb testing.TB) sinks.Sink { return jetStreamSink(tb, startJetStream(tb)) }},
}

// startKfake runs kfake in this process and returns its address.
func startKfake(tb testing.TB) string {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(6))
	if err != nil {
		tb.Fatalf("kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// startJetStream runs a real nats-server with JetStream in this process,
// storing to files as a production server does.
func startJetStream(tb testing.TB) string {
	tb.Helper()
	return natstest.Embedded(tb).ClientURL()
}

// validated applies defaults to a one-resource, one-sink configuration and
// validates it, as kubewire does with its file.
func validated(tb testing.TB, k benchdata.Kind, s config.Sink) *config.Config {
	tb.Helper()
	c := &config.Config{
		APIVersion: config.APIVersion, Kind: config.Kind, Cluster: "bench",
		Resources: []config.Resource{{Group: k.GVR.Group, Version: k.GVR.Version, Resource: k.GVR.Resource, Sinks: []string{s.Name}}},
		Sinks:     []config.Sink{s},
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		tb.Fatalf("benchmark config is invalid: %v", err)
	}
	return c
}

func kafkaSink(tb testing.TB, addr string) sinks.Sink {
	tb.Helper()
	c := validated(tb, benchdata.Pods, config.Sink{Name: "kafka", Type: kafka.Type, Block: &kafka.Config{
		Brokers: []string{addr}, CreateTopics: &kafka.CreateTopics{Partitions: 6, ReplicationFactor: 1},
	}})
	s, err := kafka.Spec.New(c.Sinks[0].Name, c.Sinks[0].Block, sinks.Deps{Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func jetStreamSink(tb testing.TB, url string) sinks.Sink {
	tb.Helper()
	c := validated(tb, benchdata.Pods, config.Sink{Name: "jetstream", Type: natssink.Type, Block: &natssink.Config{
		Servers: []string{url}, Mode: natssink.ModeJetStream,
		JetStream: &natssink.JetStream{Stream: &natssink.Stream{Name: "KUBEWIRE"}},
	}})
	s, err := natssink.Spec.New(c.Sinks[0].Name, c.Sinks[0].Block, sinks.Deps{Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// staticMapper resolves the benchmark kinds without a discovery endpoint.
type staticMapper struct{ *meta.DefaultRESTMapper }

func (staticMapper) Reset() {}

func mapperFor(k benchdata.Kind) meta.ResettableRESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	scope := meta.RESTScopeRoot
	if k.Namespaced {
		scope = meta.RESTScopeNamespace
	}
	m.Add(k.GVR.GroupVersion().WithKind(k.Kind), scope)
	return staticMapper{m}
}

// fanout is what the app puts between a watcher and its dispatchers.
type fanout []*dispatch.Dispatcher

func (f fanout) Enqueue(c *informer.Change) {
	it := dispatch.NewItem(c)
	for _, d := range f {
		d.Enqueue(it)
	}
}

// pipeline is kubewire's data path for one resource and one sink, wired as
// internal/wiring/app wires it, reading from a replayed apiserver.
type pipeline struct {
	ack    *acker
	d      *dispatch.Dispatcher
	cancel context.CancelFunc
	ran    chan struct{}
}

// startPipeline runs the real informer machinery, kubewire's listener, the
// dispatcher and sink against the replay server at apiserver, with the
// resource's cache set to cache (raw or unstructured).
func startPipeline(tb testing.TB, k benchdata.Kind, apiserver string, sink sinks.Sink, cache string) *pipeline {
	tb.Helper()
	p := &pipeline{ack: newAcker(sink)}
	p.d = newDispatcher(tb, "out", p.ack)
	p.d.Start()
	p.cancel, p.ran = startWatcher(tb, k, apiserver, fanout{p.d}, cache)
	return p
}

// newDispatcher is a dispatcher with kubewire's default options, the disk
// spool included (a healthy sink never uses it, but Enqueue checks it).
func newDispatcher(tb testing.TB, name string, sink sinks.Sink) *dispatch.Dispatcher {
	cfg := &config.Config{Sinks: []config.Sink{{Name: name, Type: stdout.Type}}}
	cfg.ApplyDefaults()
	d := dispatch.NewDispatcher(name, sink, dispatch.Options{
		Shards: cfg.Dispatch.Shards, BufferEvents: cfg.Dispatch.BufferEvents, BufferBytes: cfg.Dispatch.BufferBytes,
		BatchSize: cfg.Dispatch.BatchSize, Logger: quiet,
	})
	sc := cfg.Sinks[0]
	if sc.Overflow == config.OverflowSpool {
		if err := d.UseSpool(spool.Options{Dir: tb.TempDir(), MaxBytes: sc.Spool.MaxBytes, Fsync: sc.Spool.Fsync}); err != nil {
			tb.Fatal(err)
		}
	}
	return d
}

// startWatcher runs the real informer machinery and kubewire's listener for
// kind k against the replay server at apiserver, handing changes to out. ran
// closes once cancel has stopped it.
func startWatcher(tb testing.TB, k benchdata.Kind, apiserver string, out fanout, cache string) (cancel context.CancelFunc, ran chan struct{}) {
	tb.Helper()
	cfg := validated(tb, k, config.Sink{Name: "out", Type: stdout.Type})
	res := cfg.Resources[0]
	res.Cache = cache
	rc := &rest.Config{Host: apiserver, QPS: cfg.Client.QPS, Burst: cfg.Client.Burst}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		tb.Fatal(err)
	}
	var rawREST rest.Interface
	if res.RawCache() {
		if rawREST, err = raw.NewRESTClient(rc); err != nil {
			tb.Fatal(err)
		}
	}
	w := informer.NewWatcher(informer.Options{
		Cluster: cfg.Cluster, Resource: res, Dynamic: dyn, REST: rawREST, Mapper: mapperFor(k),
		Out: out, Logger: quiet,
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran = make(chan struct{})
	go func() {
		defer close(ran)
		w.Run(ctx)
	}()
	return cancel, ran
}

// stop stops the informer, then drains the dispatcher.
func (p *pipeline) stop() {
	p.cancel()
	<-p.ran
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.d.Close(ctx)
}

// heapAfterGC is the live heap after two collections.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// reportPipeline stops the timer of a pipeline benchmark that started at
// start, with cpu0 of CPU used and before's allocations, and reports its
// rate and its CPU time and allocations per event.
func reportPipeline(b *testing.B, start time.Time, cpu0 time.Duration, before *runtime.MemStats) {
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/event")
}

// cpuTime is the user and system CPU time of this process so far.
func cpuTime() time.Duration { return benchdata.ProcessCPU() }
