//go:build bench

package perf

// The harnesses in this file run kubewire, as the app wires it, against a
// real etcd and kube-apiserver. They take minutes and need the testbin
// binaries, so they are behind the "bench" build tag and never part of
// make test. They are tests, not benchmarks, because each produces a few
// figures from one long run rather than a per-op time; the figures are
// logged with t.Logf in one "RESULT" line each, for docs/benchmarks.md.
//
//	go test -tags bench -run 'APIServer' -v -timeout 60m ./test/perf
//	KUBEWIRE_BENCH_N=100000 go test -tags bench -run 'Snapshot' -v -timeout 120m ./test/perf
//	KUBEWIRE_BENCH_CACHE=raw KUBEWIRE_BENCH_N=100000 go test -tags bench -run 'Snapshot' -v -timeout 120m ./test/perf
//	KUBEWIRE_BENCH_KIND=pods KUBEWIRE_BENCH_CACHE=raw KUBEWIRE_BENCH_N=50000 go test -tags bench -run 'Snapshot' -v -timeout 120m ./test/perf
//	KUBEWIRE_BENCH_RATES=200,1000 KUBEWIRE_BENCH_SECONDS=20 go test -tags bench -run 'Latency' -v ./test/perf
//	KUBEWIRE_BENCH_BROKERS=kafka go test -tags bench -run 'Latency' -v ./test/perf  (real Kafka only; needs java)

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// 100k Pods, each written twice (create, then status), come close to
	// etcd's default 2 GiB quota (the database was 1.4 GB at 93k Pods); the
	// headroom keeps larger runs from failing with "mvcc: database space
	// exceeded".
	c, err := testcluster.Start(ctx, testcluster.Options{Progress: os.Stderr, EtcdQuotaBackendBytes: 8 << 30})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test cluster:", err)
		return 1
	}
	defer c.Stop()
	cluster = c
	code := m.Run()
	if binaryPath != "" {
		// BenchmarkShippedBinary's kubewire, about 50 MB.
		os.RemoveAll(filepath.Dir(binaryPath))
	}
	return code
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// adminConfig is the admin's REST config without client-side throttling, so
// the fixture writers are limited by the apiserver, not by client-go.
func adminConfig() *rest.Config {
	rc := cluster.RESTConfig(testcluster.AdminUser)
	rc.QPS, rc.Burst = 5000, 10000
	// benchdata's Pods name two container ports "http"; the apiserver warns
	// on every create, once is enough.
	rc.WarningHandler = rest.NewWarningWriter(os.Stderr, rest.WarningWriterOptions{Deduplicate: true})
	return rc
}

func createNamespace(t *testing.T, kube kubernetes.Interface, name string) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// benchKind is the kind TestSnapshotAgainstAPIServer creates and watches:
// KUBEWIRE_BENCH_KIND=configmaps (the default) or pods.
func benchKind(t *testing.T) benchdata.Kind {
	switch v := cmpOr(os.Getenv("KUBEWIRE_BENCH_KIND"), "configmaps"); v {
	case "configmaps", "configmap":
		return benchdata.ConfigMaps
	case "pods", "pod":
		return benchdata.Pods
	default:
		t.Fatalf("KUBEWIRE_BENCH_KIND: %q is neither configmaps nor pods", v)
		return benchdata.Kind{}
	}
}

// createConfigMaps creates n generated ConfigMaps in ns with 32 writers and
// returns how long it took.
func createConfigMaps(t *testing.T, dyn dynamic.Interface, ns string, n int) time.Duration {
	t.Helper()
	return createObjects(t, dyn, benchdata.ConfigMaps, ns, n)
}

// createObjects creates n generated objects of kind k in ns with 32 writers
// and returns how long it took.
//
// The apiserver drops a Pod's status on create, so each Pod is written
// twice, as in a cluster: created with the spec under the field manager
// kube-controller-manager, then its status (running, with container
// statuses) merge-patched through the status subresource as the kubelet.
// The served Pod then has benchdata's shape, managedFields of both managers
// included.
func createObjects(t *testing.T, dyn dynamic.Interface, k benchdata.Kind, ns string, n int) time.Duration {
	t.Helper()
	ri := dyn.Resource(k.GVR).Namespace(ns)
	start := time.Now()
	next := atomic.Int64{}
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || failed.Load() != nil {
					return
				}
				if err := createObject(ri, k, i, ns); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("creating %s: %v", k.GVR.Resource, err)
	}
	return time.Since(start)
}

func createObject(ri dynamic.ResourceInterface, k benchdata.Kind, i int, ns string) error {
	o := k.New(benchdata.DefaultSeed, i)
	m := o["metadata"].(map[string]any)
	// What the server sets itself, it must not be sent.
	for _, f := range []string{"uid", "creationTimestamp", "managedFields"} {
		delete(m, f)
	}
	m["namespace"] = ns
	status, hasStatus := o["status"]
	delete(o, "status")
	opts := metav1.CreateOptions{}
	if k.Name == benchdata.Pods.Name {
		opts.FieldManager = "kube-controller-manager"
	}
	created, err := ri.Create(context.Background(), &unstructured.Unstructured{Object: o}, opts)
	if err != nil || !hasStatus {
		return err
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = ri.Patch(context.Background(), created.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubelet"}, "status")
	return err
}

// servedJSONBytes is the mean size of the objects in ns as the apiserver
// serves them (managedFields included), read page by page so the
// measurement itself holds little memory.
func servedJSONBytes(t *testing.T, dyn dynamic.Interface, k benchdata.Kind, ns string) (mean float64, count int) {
	t.Helper()
	ri := dyn.Resource(k.GVR).Namespace(ns)
	total := 0
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := ri.List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range l.Items {
			b, err := json.Marshal(l.Items[i].Object)
			if err != nil {
				t.Fatal(err)
			}
			total += len(b)
			count++
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			break
		}
	}
	return float64(total) / float64(count), count
}

// run is one in-process kubewire started through app.New with a config file
// as a user writes it. Its one sink's adapter is wrapped in an acker.
type run struct {
	ack    *acker
	cancel context.CancelFunc
	done   chan struct{}
}

func startKubewire(t *testing.T, cfgYAML string) *run {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgYAML), app.DefaultRegistry())
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	r := &run{done: make(chan struct{})}
	reg := app.DefaultRegistry()
	for typ, spec := range reg {
		build := spec.New
		spec.New = func(name string, blk config.SinkBlock, d sinks.Deps) (sinks.Sink, error) {
			s, err := build(name, blk, d)
			if err != nil {
				return nil, err
			}
			r.ack = newAcker(s)
			return r.ack, nil
		}
		reg[typ] = spec
	}
	a, err := app.New(app.Options{Config: cfg, REST: cluster.RESTConfig(testcluster.AdminUser), Logger: quiet, Registry: reg})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		a.Run(ctx)
	}()
	return r
}

func (r *run) stop() {
	r.cancel()
	<-r.done
}

// benchCache is the cache of the watched resource: KUBEWIRE_BENCH_CACHE,
// else kubewire's own default, raw.
func benchCache() string { return cmpOr(os.Getenv("KUBEWIRE_BENCH_CACHE"), config.CacheRaw) }

// kubewireConfig watches ns's resource (configmaps, pods) with the cache
// benchCache names.
func kubewireConfig(resource, ns, sinkYAML string) string {
	cache := benchCache()
	return `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: bench
sinks:
` + sinkYAML + `
resources:
  - {version: v1, resource: ` + resource + `, namespaces: [` + ns + `], cache: ` + cache + `, sinks: [out]}
`
}

// kfakeSinkYAML is the sink for a Kafka broker at addr, kfake or real.
func kfakeSinkYAML(addr string) string {
	return `  - name: out
    type: kafka
    kafka:
      brokers: [` + addr + `]
      createTopics: {partitions: 6, replicationFactor: 1}`
}

func jetStreamSinkYAML(url string) string {
	return `  - name: out
    type: nats
    nats:
      servers: [` + url + `]
      jetstream:
        stream: {name: KUBEWIRE}`
}

// peakRSS is VmHWM, the process's peak resident set, in bytes.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// procCPU is the user+system CPU time of process pid so far, from
// /proc/pid/stat (in clock ticks of 10 ms, Linux's USER_HZ on amd64).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name may hold spaces; the fields after it do not.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// procRSS is process pid's current resident set, in bytes.
func procRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// cpuSplit is the CPU time of this process, etcd and kube-apiserver so far.
type cpuSplit struct{ test, etcd, apiserver time.Duration }

func readCPUSplit() cpuSplit {
	s := cpuSplit{test: cpuTime()}
	if pids := cluster.PIDs(); len(pids) == 2 { // etcd, then kube-apiserver
		s.etcd, s.apiserver = procCPU(pids[0]), procCPU(pids[1])
	}
	return s
}

func (s cpuSplit) sub(o cpuSplit) cpuSplit {
	return cpuSplit{s.test - o.test, s.etcd - o.etcd, s.apiserver - o.apiserver}
}

// resetPeakRSS makes VmHWM start again from the current RSS (Linux's
// clear_refs value 5), so the peak is that of the phase being measured.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// TestSnapshotAgainstAPIServer creates N objects (KUBEWIRE_BENCH_N, default
// 10,000) of KUBEWIRE_BENCH_KIND (configmaps, the default, or pods), starts kubewire with a Kafka sink on kfake, and reports
// the time from start to the acknowledged snapshot.completed marker, the
// heap each cached object holds, and the peak RSS of the run.
//
// A second RESULT line splits the CPU time of the snapshot between this
// process (kubewire and kfake), kube-apiserver and etcd, and gives the
// servers' RSS; KUBEWIRE_BENCH_CPUPROFILE=file writes a CPU profile of this
// process during the snapshot.
//
// The heap per object is the difference between the live heap with kubewire
// synced and idle, and after it stopped, both after GC; what the in-process
// kfake stores is in both and cancels out. The peak RSS is the test
// process's, and so includes kfake holding every record it was sent.
func TestSnapshotAgainstAPIServer(t *testing.T) {
	n := envInt("KUBEWIRE_BENCH_N", 10000)
	k := benchKind(t)
	rc := adminConfig()
	kube := kubernetes.NewForConfigOrDie(rc)
	dyn := dynamic.NewForConfigOrDie(rc)
	ns := fmt.Sprintf("bench-snapshot-%s-%d", k.GVR.Resource, n)
	createNamespace(t, kube, ns)
	created := createObjects(t, dyn, k, ns, n)
	jsonMean, listed := servedJSONBytes(t, dyn, k, ns)
	if listed != n {
		t.Fatalf("listed %d %s, created %d", listed, k.GVR.Resource, n)
	}
	addr := startKfake(t)

	base := heapAfterGC()
	if path := os.Getenv("KUBEWIRE_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	resetPeakRSS()
	cpu0 := readCPUSplit()
	start := time.Now()
	r := startKubewire(t, kubewireConfig(k.GVR.Resource, ns, kfakeSinkYAML(addr)))
	select {
	case <-r.ack.synced:
	case <-time.After(30 * time.Minute):
		t.Fatal("snapshot not acknowledged within 30m")
	}
	snapshot := time.Since(start)
	cpu := readCPUSplit().sub(cpu0)
	pprof.StopCPUProfile()
	rss := peakRSS()
	var etcdRSS, apiRSS int64
	if pids := cluster.PIDs(); len(pids) == 2 {
		etcdRSS, apiRSS = procRSS(pids[0]), procRSS(pids[1])
	}
	with := heapAfterGC()
	r.stop()
	r = nil
	after := heapAfterGC()
	perObj := float64(int64(with)-int64(after)) / float64(n)
	t.Logf("RESULT snapshot kind=%s cache=%s N=%d created_in=%s (%.0f/s) snapshot_published_in=%s (%.0f objects/s) heap_per_object=%.0fB json_per_object=%.0fB ratio=%.2f heap_base=%dMiB heap_synced=%dMiB peak_rss=%dMiB",
		k.GVR.Resource, benchCache(), n, created.Round(time.Millisecond), float64(n)/created.Seconds(), snapshot.Round(time.Millisecond), float64(n)/snapshot.Seconds(),
		perObj, jsonMean, perObj/jsonMean, base>>20, with>>20, rss>>20)
	t.Logf("RESULT snapshot-cpu kind=%s N=%d wall=%s cpu_test=%s cpu_apiserver=%s cpu_etcd=%s apiserver_rss=%dMiB etcd_rss=%dMiB",
		k.GVR.Resource, n, snapshot.Round(time.Millisecond), cpu.test.Round(10*time.Millisecond), cpu.apiserver.Round(10*time.Millisecond),
		cpu.etcd.Round(10*time.Millisecond), apiRSS>>20, etcdRSS>>20)
}

// latencySample is one change: when it was written, seen by the informer,
// and acknowledged by the broker.
type latencySample struct{ written, observed, acked time.Time }

// TestLatencyAgainstAPIServer patches ConfigMaps at a fixed rate
// (KUBEWIRE_BENCH_RATES, default "200,1000" per second, for
// KUBEWIRE_BENCH_SECONDS, default 10) and measures, per change, the time from
// the moment the patch was sent to the moment the broker acknowledged its
// event. The write time travels in the object (data.writtenAt, Unix
// nanoseconds) and is read back from the acknowledged event; the event's time
// attribute (when kubewire observed the change) splits the latency into
// apiserver+watch and kubewire+broker.
func TestLatencyAgainstAPIServer(t *testing.T) {
	seconds := envInt("KUBEWIRE_BENCH_SECONDS", 10)
	var rates []int
	for _, s := range strings.Split(cmpOr(os.Getenv("KUBEWIRE_BENCH_RATES"), "200,1000"), ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r <= 0 {
			t.Fatalf("KUBEWIRE_BENCH_RATES: %q is not a rate", s)
		}
		rates = append(rates, r)
	}
	names := strings.Split(cmpOr(os.Getenv("KUBEWIRE_BENCH_BROKERS"), "kafka,kfake,jetstream"), ",")
	// One real broker serves every rate: it takes a while to start.
	var realKafka *kafkatest.Broker
	if slices.Contains(names, "kafka") {
		realKafka = kafkatest.Start(t, nil)
	}
	brokers := map[string]func(t *testing.T) string{
		"kafka":     func(*testing.T) string { return kfakeSinkYAML(realKafka.Addr) },
		"kfake":     func(t *testing.T) string { return kfakeSinkYAML(startKfake(t)) },
		"jetstream": func(t *testing.T) string { return jetStreamSinkYAML(startJetStream(t)) },
	}
	for _, name := range names {
		yaml, ok := brokers[name]
		if !ok {
			t.Fatalf("KUBEWIRE_BENCH_BROKERS: unknown broker %q (known: kafka, kfake, jetstream)", name)
		}
		for _, rate := range rates {
			t.Run(fmt.Sprintf("%s/%d-per-s", name, rate), func(t *testing.T) {
				measureLatency(t, yaml(t), rate, seconds)
			})
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func measureLatency(t *testing.T, sinkYAML string, rate, seconds int) {
	const objects = 500
	rc := adminConfig()
	kube := kubernetes.NewForConfigOrDie(rc)
	dyn := dynamic.NewForConfigOrDie(rc)
	ns := fmt.Sprintf("bench-latency-%d-%d", rate, time.Now().UnixNano()%100000)
	createNamespace(t, kube, ns)
	createConfigMaps(t, dyn, ns, objects)

	var mu sync.Mutex
	var samples []latencySample
	total := rate * seconds
	all := make(chan struct{})
	r := startKubewire(t, kubewireConfig("configmaps", ns, sinkYAML))
	r.ack.setOnAck(func(evs []*encoding.Event, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			if ev.Type() != encoding.TypeUpdated {
				continue
			}
			w, ok := writtenAt(ev.Data())
			if !ok {
				continue
			}
			samples = append(samples, latencySample{written: w, observed: ev.Time(), acked: at})
			if len(samples) == total {
				close(all)
			}
		}
	})
	defer r.stop()
	select {
	case <-r.ack.synced:
	case <-time.After(5 * time.Minute):
		t.Fatal("initial snapshot not acknowledged within 5m")
	}

	// Open loop: a tick per change, handed to a pool of writers so a slow
	// response does not delay the next write. The time recorded is when the
	// request is sent.
	ri := dyn.Resource(benchdata.ConfigMaps.GVR).Namespace(ns)
	names := make([]string, objects)
	for i := range names {
		names[i] = benchdata.ConfigMap(benchdata.DefaultSeed, i)["metadata"].(map[string]any)["name"].(string)
	}
	jobs := make(chan int, total)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range jobs {
				patch := []byte(`{"data":{"writtenAt":"` + strconv.FormatInt(time.Now().UnixNano(), 10) + `"}}`)
				if _, err := ri.Patch(context.Background(), names[i%objects], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	// A ticker drops ticks when the machine is busy, so each tick releases
	// every write that is due by the clock, keeping the average rate.
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for i := 0; i < total; {
		<-tick.C
		due := min(total, int(time.Since(start).Seconds()*float64(rate)))
		for ; i < due; i++ {
			jobs <- i
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	sent := time.Since(start)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d patches failed", n)
	}
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		got := len(samples)
		mu.Unlock()
		t.Fatalf("only %d of %d changes acknowledged within 2m of the last write", got, total)
	}
	mu.Lock()
	defer mu.Unlock()
	e2e := make([]time.Duration, len(samples))
	watch := make([]time.Duration, len(samples))
	pipe := make([]time.Duration, len(samples))
	for i, s := range samples {
		e2e[i], watch[i], pipe[i] = s.acked.Sub(s.written), s.observed.Sub(s.written), s.acked.Sub(s.observed)
	}
	t.Logf("RESULT latency %s target=%d/s achieved=%.0f/s changes=%d write->ack p50=%s p99=%s max=%s | write->observed p50=%s p99=%s | observed->ack p50=%s p99=%s max=%s",
		t.Name(), rate, float64(total)/sent.Seconds(), total,
		pct(e2e, 50), pct(e2e, 99), pct(e2e, 100), pct(watch, 50), pct(watch, 99), pct(pipe, 50), pct(pipe, 99), pct(pipe, 100))
}

// writtenAt finds data.writtenAt in a ConfigMap's JSON without decoding it.
func writtenAt(data []byte) (time.Time, bool) {
	const key = `"writtenAt":"`
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return time.Time{}, false
	}
	rest := data[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	ns, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// pct is the p-th percentile (nearest rank) of ds; 100 is the max.
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i].Round(100 * time.Microsecond)
}
